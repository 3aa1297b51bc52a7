"""Node and agent log lines around each fault, for the reader who asks "why".

A node log mixes torchrun's agent (glog lines with their own time), the
workers' ``trainer.progress`` lines (JSON with the trainer's time) and
untimed lines (tracebacks). Each line takes the time of its own stamp or,
lacking one, of the line before it; the excerpt is the window around the
fault, with runs of step lines folded into one line so the agent's story
stays readable.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path

from chaos.events import ProgressEv
from chaos.watchers.glog import glog_time
from chaos.watchers.logs import parse_progress

_GLOG_TIME = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ")

MAX_LINES = 60
BEFORE_S = 3.0
AFTER_MAX_S = 60.0


@dataclass(frozen=True)
class Line:
    t: float | None
    text: str
    level: str
    """``agent`` (torchrun), ``progress`` (a step folded), ``error``, ``expected`` (an error a survivor
    is expected to show after losing a peer: how it notices) or ``plain``."""


@dataclass(frozen=True)
class Excerpt:
    node: str
    start: float
    end: float
    lines: tuple[Line, ...]
    omitted: int

    @property
    def expected_errors(self) -> bool:
        """Whether some lines are errors the fault is expected to cause (marked ``expected``)."""
        return any(ln.level == "expected" for ln in self.lines)


EXPECTED_NOTE = ("expected: after a peer is lost, a survivor's collective fails (connection closed or reset, "
                 "or a timeout) and its agent sees the worker fail: that is how the job notices, not a bug")
_COLLECTIVE_FAILED = re.compile(r"Connection (?:closed|reset) by peer|Read error|Broken pipe|timed out|"
                                r"Timeout|NCCL|ProcessGroup|DistNetworkError|DistBackendError", re.I)
_WORKER_LINE = re.compile(r"^\[rank\d+\]:")
_AGENT_SAW_FAILURE = re.compile(r"failed \(exitcode: |Worker group FAILED|ChildFailedError")


def timed_lines(path: Path, ref: float, max_bytes: int = 20_000_000,
                tz: datetime.tzinfo | None = None) -> list[tuple[float | None, str]]:
    """Every line of a log with its time (own stamp, else the previous line's).
    glog stamps carry no year and no zone: the year is taken from ``ref`` (a time in the
    log's span), the zone is ``tz`` (None: local time; pods log in UTC)."""
    today = datetime.datetime.fromtimestamp(ref, tz).date()
    try:
        with open(path, "rb") as f:
            raw = f.read(max_bytes)
    except OSError:
        return []
    out: list[tuple[float | None, str]] = []
    last: float | None = None
    for line in raw.decode("utf-8", "replace").splitlines():
        t = line_time(line, today, tz)
        if t is not None:
            last = t
        out.append((last, line))
    return out


def line_time(line: str, today: datetime.date | None = None, tz: datetime.tzinfo | None = None) -> float | None:
    m = _GLOG_TIME.match(line)
    if m:
        month, day, hh, mm, ss, us = (int(x) for x in m.groups())
        try:
            return glog_time(month, day, hh, mm, ss, us, today, tz)
        except ValueError:
            return None
    ev = parse_progress(line, "")
    return ev.t if ev is not None else None


def _kind(line: str) -> str:
    if parse_progress(line, "") is not None:
        return "progress"
    if _GLOG_TIME.match(line):
        return "error" if line[0] in "EF" else "agent"
    if "Error" in line or "Traceback" in line:
        return "error"
    return "plain"


def excerpt(node: str, path: Path, start: float, end: float, tz: datetime.tzinfo | None = None, *,
            survivor_after: float | None = None) -> Excerpt:
    """The node's log lines timed within [start, end], step lines folded, at most MAX_LINES
    (``tz``: the zone of the agents' log times). ``survivor_after``: the node survived a fault at
    that time, so a collective's failure after it (its worker's traceback, its agent seeing the
    worker fail) is marked ``expected``."""
    picked: list[Line] = []
    folded: list[tuple[float | None, str]] = []

    def flush() -> None:
        if folded:
            steps = [ev.data.step for _, text in folded
                     if (ev := parse_progress(text, "")) is not None and ev.type == ProgressEv.STEP]
            what = f"steps {steps[0]}..{steps[-1]}" if steps else "progress lines"
            picked.append(Line(folded[0][0], f"... {len(folded)} trainer progress line(s) ({what}) ...",
                               "progress"))
            folded.clear()

    for t, text in timed_lines(path, end, tz=tz):
        if t is None or t < start or t > end:
            continue
        if _is_step(text):
            folded.append((t, text))
            continue
        flush()
        picked.append(Line(t, text, _kind(text)))
    flush()
    if survivor_after is not None:
        picked = _mark_expected(picked, survivor_after)
    omitted = max(0, len(picked) - MAX_LINES)
    if omitted:
        half = MAX_LINES // 2
        picked = [*picked[:half], Line(None, f"... {omitted} line(s) omitted ...", "plain"),
                  *picked[-half:]]
    return Excerpt(node=node, start=start, end=end, lines=tuple(picked), omitted=omitted)


def _mark_expected(lines: list[Line], after: float) -> list[Line]:
    """A survivor's worker traceback that ends in a failed collective after the fault, and its
    agent's lines that the worker failed, become ``expected``."""
    out = list(lines)
    i = 0
    while i < len(out):
        t = out[i].t
        if t is not None and t >= after and _WORKER_LINE.match(out[i].text):
            j = i
            while j < len(out) and _WORKER_LINE.match(out[j].text):
                j += 1
            if any(_COLLECTIVE_FAILED.search(ln.text) for ln in out[i:j]):
                out[i:j] = [Line(ln.t, ln.text, "expected") for ln in out[i:j]]
                k = j
                while k < len(out) and (_AGENT_SAW_FAILURE.search(out[k].text) or out[k].level == "error"):
                    if _AGENT_SAW_FAILURE.search(out[k].text):
                        out[k] = Line(out[k].t, out[k].text, "expected")
                    k += 1
            i = j
        else:
            i += 1
    return out


def _is_step(text: str) -> bool:
    ev = parse_progress(text, "")
    return ev is not None and ev.type == ProgressEv.STEP


def window(injected_at: float, regain_s: float | None) -> tuple[float, float]:
    """From a little before the fault to a little after progress was regained
    (at most AFTER_MAX_S when it never was)."""
    after = min(regain_s + 2.0, AFTER_MAX_S) if regain_s is not None else AFTER_MAX_S
    return injected_at - BEFORE_S, injected_at + after
