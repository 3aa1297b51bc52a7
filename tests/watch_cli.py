"""``elastic-chaos watch`` run as a user runs it: a child process, awaited until it watches."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from elastic_chaos.waiting import until


def cli(*args: str) -> list[str]:
    """The command line of ``elastic-chaos ARGS`` with this interpreter."""
    return [sys.executable, "-m", "elastic_chaos.cli.main", *args]


def wait_until_watching(record: Path, timeout: float = 60.0) -> None:
    """Until the watch has recorded its 'watching' phase (its first etcd read follows at once)."""
    timeline = record / "timeline.jsonl"
    until(lambda: timeline.exists() and '"phase":"watching"' in timeline.read_text(),
          what="the watch to start", timeout_s=timeout, interval_s=0.1)
    time.sleep(0.8)
