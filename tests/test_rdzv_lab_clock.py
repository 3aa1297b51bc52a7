"""Time dilation (bench.rdzv.clock) and the store's CPU quota (bench.rdzv.throttle): the arithmetic, what
install() patches in torch (in a child process: it is process-wide), and a real cgroup on this machine."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.rdzv import clock, throttle
from bench.rdzv.clock import Dilation


class FakeTime:
    """A stand-in for the time module: real seconds advance only when the test says so."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t
        self.slept: list[float] = []

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t - 900.0

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_perceived_time_runs_dilation_times_slower_from_the_shared_epoch(monkeypatch):
    fake = FakeTime(1000.0)
    monkeypatch.setattr(clock, "_time", fake)
    d = Dilation(4.0, epoch=1000.0)
    m0 = d.monotonic()
    fake.t += 8.0
    assert d.time() == pytest.approx(1002.0)
    assert d.monotonic() - m0 == pytest.approx(2.0)
    d.sleep(1.5)
    assert fake.slept == [6.0]  # 1.5 perceived seconds are 6 real ones
    d.sleep_until(d.time() + 0.5)
    assert fake.slept[-1] == pytest.approx(2.0)
    d.sleep(-1.0)
    assert len(fake.slept) == 2  # a time already past: no sleep
    assert d.real_s(3.0) == 12.0 and d.perceived_s(12.0) == 3.0


def test_two_processes_clocks_agree_when_they_share_the_epoch(monkeypatch):
    fake = FakeTime(5000.0)
    monkeypatch.setattr(clock, "_time", fake)
    a = Dilation(8.0, epoch=4000.0)
    fake.t += 3.0  # the second process starts later
    b = Dilation(8.0, epoch=4000.0)
    assert a.time() == b.time()  # a heartbeat one writes, the other reads on the same clock


def test_a_dilation_below_one_is_refused():
    with pytest.raises(ValueError, match=">= 1"):
        Dilation(0.5)


CHILD = textwrap.dedent("""
    import time
    from datetime import datetime, timedelta, timezone
    from bench.rdzv import clock
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dr, utils

    factor = float(__import__("sys").argv[1])
    c = clock.install(factor, time.time() - 100.0)
    now = dr.datetime.now(timezone.utc)
    assert type(now) is datetime, type(now)  # a plain datetime goes into the pickled state
    assert abs(now.timestamp() - c.time()) < 1.0
    timer = dr._PeriodicTimer(timedelta(seconds=2), lambda: None)
    print(factor, round(timer._ctx.interval, 3), dr.time.monotonic == c.monotonic, utils.time.sleep == c.sleep,
          api.time.monotonic == c.monotonic, round(time.time() - now.timestamp()))
""")


@pytest.mark.parametrize("factor, interval, patched, behind", [(5.0, "10.0", "True", 80), (1.0, "2.0", "False", 0)])
def test_install_dilates_the_clocks_torch_reads_and_leaves_them_alone_at_one(factor, interval, patched, behind):
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", CHILD, str(factor)], capture_output=True, text=True, cwd=root,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = out.stdout.split()
    assert got[1] == interval  # the keep-alive timer waits factor x its interval in real time
    assert got[2:5] == [patched] * 3
    assert abs(int(got[5]) - behind) <= 1  # 100 real s since the epoch are 20 perceived: 80 s behind


def test_the_store_quota_is_one_ms_of_cpu_per_dilation_ms_and_leaves_nothing_behind(tmp_path):
    why = throttle.available()
    if why is not None:
        pytest.fail(f"this machine is meant to allow a CPU cgroup (root, cgroup v1 cpu): {why}")
    quota = throttle.CpuQuota(8.0, tag=f"test-{tmp_path.name}")
    try:
        assert quota.share == pytest.approx(1 / 8)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            quota.add(child.pid)
            assert str(child.pid) in (quota.path / "cgroup.procs").read_text().split()
            assert quota.throttled_s() >= 0.0
        finally:
            child.kill()
            child.wait(10)
    finally:
        quota.remove()
    assert not quota.path.exists()


def _dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(30)
    return done.pid


def test_only_our_empty_cgroups_whose_maker_is_gone_are_reaped(tmp_path):
    dead = _dead_pid()
    left = tmp_path / f"{throttle.PREFIX}{dead}-run1"
    ours = tmp_path / f"{throttle.PREFIX}{os.getpid()}-run2"  # its maker lives
    busy = tmp_path / f"{throttle.PREFIX}{dead}-run3"  # not empty: rmdir refuses it, as the kernel would
    other = tmp_path / f"somebody-else-{dead}"
    for d in (left, ours, busy, other):
        d.mkdir()
    (busy / "cgroup.procs").write_text("1\n")
    assert throttle.reap_stale(tmp_path) == [left]
    assert not left.exists() and ours.exists() and busy.exists() and other.exists()


def test_a_harness_killed_before_removing_its_cgroup_leaves_it_for_the_next_to_reap():
    if throttle.available() is not None:
        pytest.fail(f"this machine is meant to allow a CPU cgroup (root, cgroup v1 cpu): {throttle.available()}")
    maker = subprocess.run([sys.executable, "-c", "import os, signal; from bench.rdzv import throttle; "
                            "q = throttle.CpuQuota(4.0, tag='killed'); print(q.path, flush=True); "
                            "os.kill(os.getpid(), signal.SIGKILL)"], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).resolve().parents[1])  # bench/ is imported from the repository root
    assert maker.returncode == -9
    stale = Path(maker.stdout.strip())
    assert stale.is_dir()  # left behind
    quota = throttle.CpuQuota(4.0, tag="next")
    try:
        assert not stale.exists()
    finally:
        quota.remove()


def test_without_a_cgroup_controller_the_reason_is_given(monkeypatch, tmp_path):
    monkeypatch.setattr(throttle, "V1", tmp_path / "no-v1")
    monkeypatch.setattr(throttle, "V2", tmp_path / "no-v2")
    assert "cgroup" in (throttle.available() or "")
    with pytest.raises(OSError, match="cgroup"):
        throttle.CpuQuota(4.0)
