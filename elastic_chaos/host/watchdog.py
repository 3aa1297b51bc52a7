"""A run's watchdog: a small process that stops everything of the run when its runner dies.

The kernel's death signal (:mod:`~elastic_chaos.host.lifeline`) reaches only
the runner's direct children: an agent and etcd die with the runner, but the
workers an agent started, in sessions of their own, would train on (and a
forking etcd's children would serve on). Without root there is no cgroup to
kill them by. So each local run starts one watchdog, in its own session (a
terminal's Ctrl-C is the runner's to handle), whose stdin is a pipe only the
runner holds. The runner writes ``done`` once it has stopped everything itself;
end-of-file without it means the runner died, however it died, and the watchdog
reaps the run from its registry record (tagged processes, etcd's group, cgroups,
network namespaces), appends what it did to the run's timeline, leaves a note
for the next run to report, and exits.

Run as ``python -m elastic_chaos.host.watchdog RECORD``.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from elastic_chaos.errors import SetupError
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.events.runner_events import Reaped
from elastic_chaos.host.registry import Registry

DONE = b"done\n"


class Watchdog:
    """The runner's end of the pipe. ``release()`` is idempotent."""

    def __init__(self, record: Path, log_path: Path) -> None:
        self.record = record
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> Watchdog:
        """Start the watchdog process; returns at once. SetupError if it cannot start."""
        here = str(Path(__file__).resolve().parents[3])  # the folder holding elastic_chaos/: this runner's code
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))}
        try:
            with open(self.log_path, "wb") as log:
                self._proc = subprocess.Popen([sys.executable, "-m", "elastic_chaos.host.watchdog",
                                               str(self.record)], stdin=subprocess.PIPE, stdout=log, stderr=log,
                                              env=env, start_new_session=True)
        except OSError as exc:
            raise SetupError(f"could not start the run's watchdog: {exc}") from exc
        return self

    def release(self, timeout_s: float = 10.0) -> None:
        """Tell the watchdog the run stopped everything itself; it exits without acting."""
        proc, self._proc = self._proc, None
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(DONE)
            proc.stdin.close()
        except OSError:
            pass  # it is gone already
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout_s)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    record_path = Path(args[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    said = sys.stdin.buffer.read()  # until the runner writes `done` or dies
    if said.endswith(DONE):
        return 0
    registry = Registry(record_path.parent.parent)
    record = registry.load(record_path)
    if record is None:
        return 0  # the runner forgot it: everything was stopped
    reaped = registry.reap(record, by="its watchdog")
    if reaped is None:
        return 0  # another reaper claimed it
    registry.leave_note(reaped)
    print(reaped.describe(), file=sys.stderr, flush=True)
    timeline_path = Path(record.report_dir) / "timeline.jsonl"
    if timeline_path.parent.is_dir():
        timeline = Timeline(timeline_path)
        timeline.emit(RunnerEv.REAPED, None, Reaped.read(reaped.to_json()))
        timeline.close()
    return 1 if reaped.errors else 0


if __name__ == "__main__":
    sys.exit(main())
