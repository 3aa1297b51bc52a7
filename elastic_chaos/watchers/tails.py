"""The last lines a script printed on each node: what a run that ended early shows its reader.

A node log holds torchrun's own words (its glog lines, its closing traceback) and the script's
output; the tail a person needs is the script's. Where the agent copied its workers' lines into
the log (``--tee``: each prefixed ``[default<local rank>]:``, elastic_chaos.watchers.sources) those copies
are the script's lines, shown with their prefix (which worker printed each, as in the report's
excerpts); in a log without them torchrun's lines are left out by their look (the one glog matcher
of elastic_chaos.watchers.glog). The raw log's tail stands in when the script printed nothing.
"""
from __future__ import annotations

from pathlib import Path

from elastic_chaos.watchers.glog import GLOG
from elastic_chaos.watchers.sources import TEE, without_tee

TAIL_LINES = 12
TAIL_BYTES = 256 * 1024
"""How much of a log's end is read for its tail: a log of any size costs this much memory."""


def script_output(lines: list[str]) -> list[str]:
    """The script's lines of a node log: the workers' copies, prefix kept (torch's own logging in a
    worker left out); in a log without copies, the log without torchrun's own words: its glog
    lines, and the agent's closing traceback and ChildFailedError summary (which name no cause)."""
    copies = [x for x in lines if TEE.match(x)]
    if copies:
        return [x for x in copies if not GLOG.match(without_tee(x))]
    end = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback") and any("torch/distributed/run.py" in x for x in lines[i + 1:i + 6]):
            end = i
            break
    return [x for x in lines[:end] if not GLOG.match(x)]


def log_tails(node_logs: dict[str, Path], lines: int = TAIL_LINES) -> list[str]:
    """The last lines the script printed on every node (torchrun's own lines left
    out; the raw log's tail when the script printed nothing), one block per node."""
    out = []
    for name, path in sorted(node_logs.items()):
        try:
            raw = _end_of(path).splitlines()
        except OSError:
            raw = ["(no log)"]
        own = script_output(raw)[-lines:]
        text, what = (own, "the script's last") if own else (raw[-lines:], "the log's last")
        out.append(f"--- {name}: {what} {len(text)} lines ({path}) ---\n" + "\n".join(text))
    return out


def _end_of(path: Path) -> str:
    """The last TAIL_BYTES of ``path`` as text, from its first whole line."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(max(0, size - TAIL_BYTES))
        data = f.read()
    if size > TAIL_BYTES:
        data = data.split(b"\n", 1)[-1]
    return data.decode("utf-8", "replace")
