"""Every sentence of a report, checked: against the other renderings and against the timeline it came from.

A run's report is read four ways — report.json (the facts), the CLI's text (``render_table``, what
``elastic-chaos run`` prints), summary.md and report.html — and each sentence a reader sees is held to:

- **one verdict word**: the CLI's ``verdict:`` line, summary.md's title and report.html's verdict box
  say the outcome report.json records;
- **one set of sentences**: every check (``ok:``/``FAILED:``/``not checked:``) and every remark is
  the same line in the CLI, summary.md and report.html;
- **counts from the timeline**: a check that counts saves counts the ``checkpoint/saved`` events of the
  window it names (the run up to its end; the warning to the node's end), and a sentence that
  says no checkpoint was saved before the fault has none before it;
- **figures from the facts**: ``lost N <unit>s`` is the fault's ``lost_steps``; the table's cells
  are the metrics report.json holds;
- **the run's unit**: a run that counts epochs never says "step" for its progress;
- **the landing**: a fault that began more than a second after steady state is explained.

``problems(folder)`` returns what is wrong, in sentences; the root conftest.py runs it on every
report a test of tests/ or scenarios/ made through the pytest plugin, and fails the test that made it.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.analysis.result import RunResult
from elastic_chaos.analysis.steady import LANDING_NOTE_S
from elastic_chaos.analysis.verdict import verdict_word
from elastic_chaos.events import CheckpointEv, Event, FaultEv, ProgressEv, RunnerEv, of, read_timeline
from elastic_chaos.reporting.report import render_table
from elastic_chaos.reporting.views import table

STEP_WORD = re.compile(r"\bsteps?\b")
"""How a sentence names the reference trainer's unit; a run that counts epochs must not use it for its own
progress. What may still say "step" in such a run: torch's and the toolkit's own words that are not about
the job's progress (listed in STEP_ALLOWED)."""
STEP_ALLOWED: tuple[re.Pattern[str], ...] = ()
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"|--[\w-]+")
"""What a user gave (a quoted regex, a path) and the toolkit's flags (--steady-steps): not our words."""


@dataclass(frozen=True)
class Reading:
    """One report folder, read every way a person reads it."""

    folder: Path
    result: RunResult
    events: list[Event[Any]]
    cli: str
    summary: str
    page: str
    """report.html as text (tags dropped, entities decoded, whitespace collapsed)."""

    @property
    def unit(self) -> str:
        return self.result.progress_unit


def _text_of_html(raw: str) -> str:
    raw = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", raw, flags=re.S)
    return _squash(html.unescape(re.sub(r"<[^>]+>", " ", raw)))


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def read(folder: Path) -> Reading:
    raw = json.loads((folder / "report.json").read_text())
    result = RunResult.from_json(raw)
    events = read_timeline(folder / "timeline.jsonl").events if (folder / "timeline.jsonl").exists() else []
    return Reading(folder, result, events, _squash(render_table(result)),
                   _squash((folder / "summary.md").read_text()), _text_of_html((folder / "report.html").read_text()))


Rule = Callable[[Reading], list[str]]


def verdict_words(r: Reading) -> list[str]:
    word = verdict_word(r.result.verdict)
    out = []
    if f"verdict: {word}" not in r.cli and not (r.result.verdict and f"verdict: {r.result.verdict.outcome.describe()}"
                                                 in r.cli):
        out.append(f"the CLI's verdict line does not say {word}")
    if not r.summary.startswith(f"# {r.result.scenario or r.folder.name}: {word}"):
        out.append(f"summary.md's title does not say {word}: {r.summary[:120]!r}")
    if f" {word} " not in f" {r.page} ":
        out.append(f"report.html does not say {word}")
    return out


def same_sentences(r: Reading) -> list[str]:
    """Each check line and each remark reads the same in the CLI, summary.md and report.html."""
    lines = [*(r.result.verdict.reasons if r.result.verdict else []), *table.remarks(r.result)]
    out = []
    for line in lines:
        said = _squash(line)
        for name, text in (("the CLI", r.cli), ("summary.md", r.summary), ("report.html", r.page)):
            if said not in text:
                out.append(f"{name} does not say: {said[:160]!r}")
    return out


_SAVES_SEEN = re.compile(r"(\d+) save\(s\) seen up to the end of the run")
_WINDOW = re.compile(r"between the first warning and (\S+)'s end \(\+(-?[\d.]+) s \.\. \+(-?[\d.]+) s from "
                     r"SIGTERM\): (\d+) save\(s\) in that window")


def counted_saves(r: Reading) -> list[str]:
    """A count of saves is the count of ``checkpoint/saved`` events in the window the sentence names."""
    out = []
    checks = r.result.verdict.checks if r.result.verdict else []
    finished = next((e.t for e in of(r.events, RunnerEv.PHASE) if e.data.phase == "finished"), None)
    for c in checks:
        m = _SAVES_SEEN.search(c.reason)
        if m is not None:
            seen = [e for e in of(r.events, CheckpointEv.SAVED, until=finished) if e.data.via == "file"]
            ckpt = r.result.observation.checkpoint if r.result.observation else None
            recorded = ckpt.saves_observed if ckpt is not None else None
            if int(m[1]) != len(seen) or int(m[1]) != recorded:
                out.append(f"{c.name} says {m[1]} save(s) seen; the timeline has {len(seen)}, report.json "
                           f"{recorded}")
        m = _WINDOW.search(c.reason)
        if m is not None and r.result.faults:
            f = r.result.faults[0].injected_at
            lo, hi = f + float(m[2]) - 0.05, f + float(m[3]) + 0.05
            inside = of(r.events, CheckpointEv.SAVED, after=lo, until=hi)
            if int(m[4]) != len(inside):
                out.append(f"{c.name} counts {m[4]} save(s) in +{m[2]} s .. +{m[3]} s; the timeline has "
                           f"{len(inside)} there")
    return out


_LOST = re.compile(r"\blost (\d+) (\w+?)s?, at most")


def lost_figures(r: Reading) -> list[str]:
    """``lost N <unit>s`` is its fault's lost_steps, in the run's unit: the k-th such check is the k-th fault
    that has one (a fault that interrupts nothing, a corrupted checkpoint, may come before the crash that
    costs the steps; a run of several kills says one per recovery, in order); "no checkpoint was seen saved
    before the fault" only where none was."""
    out = []
    checks = r.result.verdict.checks if r.result.verdict else []
    costing = [f.recovery for f in r.result.faults if f.recovery.lost_steps is not None]
    said = 0
    for c in checks:
        m = _LOST.search(c.reason)
        if m is None or not r.result.faults:
            continue
        rec = costing[said] if said < len(costing) else r.result.faults[0].recovery
        said += 1
        if int(m[1]) != rec.lost_steps:
            out.append(f"{c.name} says lost {m[1]}; report.json's lost_steps is {rec.lost_steps}")
        if m[2] != r.unit:
            out.append(f"{c.name} counts lost progress in {m[2]}s; the run's unit is {r.unit}")
    for f in r.result.faults:
        said = any("no checkpoint was seen saved before the fault" in n for n in f.recovery.notes)
        before = of(r.events, CheckpointEv.SAVED, until=f.injected_at)
        if said and before:
            out.append(f"{f.fault}: says no checkpoint was saved before the fault; the timeline has {len(before)}")
    return out


def units(r: Reading) -> list[str]:
    """A run that counts another unit never says "step" for its progress (checks, remarks, advice, tables)."""
    if r.unit == "step":
        return []
    texts = [*(r.result.verdict.reasons if r.result.verdict else []), *table.remarks(r.result), *table.notes(r.result),
             *(" ".join(t.rows[0]) for t in table.tables(r.result))]
    advice = r.summary.split("## Tuning advice", 1)[1] if "## Tuning advice" in r.summary else ""
    texts += [advice.split("Files:", 1)[0]]
    out = []
    for text in (_QUOTED.sub("", t) for t in texts):
        for m in STEP_WORD.finditer(text):
            around = text[max(0, m.start() - 60):m.end() + 60]
            if not any(a.search(around) for a in STEP_ALLOWED):
                out.append(f"says 'step' in a run that counts {r.unit}s: ...{around}...")
    return out


def table_cells(r: Reading) -> list[str]:
    """The recovery table's cells are report.json's metrics, the same in the CLI and summary.md."""
    out = []
    for t in table.tables(r.result):
        for row in t.rows[1:]:
            md = "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"
            if _squash(md) not in r.summary:
                out.append(f"summary.md lacks the {t.title} row {row}")
            if _squash("  ".join(row)) not in r.cli and not all(c in r.cli for c in row):
                out.append(f"the CLI lacks the {t.title} row {row}")
    return out


def landing(r: Reading) -> list[str]:
    """A fault that began more than LANDING_NOTE_S after steady state is explained in a remark."""
    steady = [e for e in of(r.events, RunnerEv.PHASE) if e.data.phase == "steady"]
    began = [e for e in of(r.events, RunnerEv.PHASE) if e.data.phase == "inject"]
    injected = of(r.events, FaultEv.INJECTED)
    if not steady or not began or not injected:
        return []
    reached = [e for e in of(r.events, ProgressEv.STEP, until=steady[0].t) if e.data.step == steady[0].data.step]
    origin = reached[-1].t if reached else steady[0].t
    gap = began[0].t - origin
    said = any("after steady state was reached" in n for f in r.result.faults for n in f.recovery.notes)
    if gap >= LANDING_NOTE_S + 0.05 and not said:
        return [f"the fault began {gap:.1f} s after steady state and no remark says why"]
    return []


RULES: tuple[Rule, ...] = (verdict_words, same_sentences, counted_saves, lost_figures, units, table_cells, landing)


def problems(folder: Path) -> list[str]:
    """What is wrong with the report in ``folder`` (no report.json: nothing to read, nothing wrong)."""
    if not (folder / "report.json").exists() or not (folder / "summary.md").exists():
        return []
    r = read(folder)
    return [f"{rule.__name__}: {p}" for rule in RULES for p in rule(r)]
