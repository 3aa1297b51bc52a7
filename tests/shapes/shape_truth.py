"""What a shape script really did, for the test to compare the report with.

Every script of the corpus calls these besides printing its own lines: one JSON
record per line in ``$SHAPE_TRUTH/<node>-<pid>.jsonl`` (a folder the test
chooses; nothing when the variable is unset). elastic-chaos never reads these
files: they are the truth the test computes, not an input of the toolkit.
Records: ``start`` (a worker began: node, rank, world size, torchrun's restart
count), ``resumed`` (the step it restored; 0 or -1 on a fresh start, in the
script's own counting), ``step`` (a step completed, with the world size),
``saved`` (a checkpoint written completely: its step and path).
"""
from __future__ import annotations

import json
import os
import time

_FOLDER = os.environ.get("SHAPE_TRUTH")
_STARTED = time.time()


def record(ev: str, **fields: object) -> None:
    """Append one record (flushed at once: a killed node's records stay)."""
    if not _FOLDER:
        return
    node = os.environ.get("ELASTIC_CHAOS_NODE_NAME", "?")
    line = {"ev": ev, "t": time.time(), "node": node, "pid": os.getpid(), "started": _STARTED,
            "rank": int(os.environ.get("RANK", "-1")),
            "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")), **fields}
    with open(os.path.join(_FOLDER, f"{node}-{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(line) + "\n")
