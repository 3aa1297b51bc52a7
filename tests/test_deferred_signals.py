"""A second Ctrl-C never interrupts a teardown; a third force-exits saying what may be left
(elastic_chaos.signals; issue 15, finding 3). Each case runs in a child process, which gets
signals as a terminal sends them."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

SCRIPT = """
import sys, time
from elastic_chaos import signals
signals.install()
signals.track(lambda: ["etcd of chaos-x (PID 4242)"])

def teardown(seconds):
    with signals.deferred():
        print("teardown started", flush=True)
        time.sleep(seconds)
        print("teardown done", flush=True)

try:
    print("running", flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    teardown(float(sys.argv[1]))
    print("exit normally", flush=True)
"""


def start(script: str, *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    return proc


def wait_line(proc: subprocess.Popen[str], wanted: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == wanted:
            return
    raise AssertionError(f"never printed {wanted!r}")


def test_a_second_ctrl_c_during_teardown_is_deferred_and_said():
    proc = start(SCRIPT, "1.5")
    with proc:
        wait_line(proc, "running")
        proc.send_signal(signal.SIGINT)
        wait_line(proc, "teardown started")
        time.sleep(0.2)
        proc.send_signal(signal.SIGINT)                         # impatient: 0.2 s into the teardown
        out, err = proc.communicate(timeout=30)
    assert out.split() == ["teardown", "done", "exit", "normally"]
    assert proc.returncode == 0
    assert "still stopping" in err and "Traceback" not in err


def test_a_third_ctrl_c_force_exits_saying_what_may_be_left():
    proc = start(SCRIPT, "30")
    with proc:
        wait_line(proc, "running")
        proc.send_signal(signal.SIGINT)
        wait_line(proc, "teardown started")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "teardown done" not in out
    assert "forced exit" in err and "etcd of chaos-x (PID 4242)" in err and "elastic-chaos reap" in err


LIBRARY = """
import time
from elastic_chaos import signals
try:
    with signals.deferred():
        print("teardown started", flush=True)
        time.sleep(1.0)
        print("teardown done", flush=True)
    print("not reached", flush=True)
except KeyboardInterrupt:
    print("interrupted after the teardown", flush=True)
"""


def test_a_first_ctrl_c_inside_a_teardown_is_raised_once_it_is_done():
    proc = start(LIBRARY)                                      # no install(): Python's own SIGINT handler
    with proc:
        wait_line(proc, "teardown started")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert out.splitlines() == ["teardown done", "interrupted after the teardown"]
    assert proc.returncode == 0


def test_a_signal_the_command_was_started_with_ignored_stays_ignored():
    proc = subprocess.Popen([sys.executable, "-c", "import signal\nfrom elastic_chaos import signals\n"
                             "signals.install()\n"
                             "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, flush=True)"],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(HERE)},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == "True"
