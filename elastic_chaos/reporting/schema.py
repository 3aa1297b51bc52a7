"""What report.json must look like to be rendered, checked field by field; and strict JSON out.

A report folder is input like any other: it may be hand-edited, cut off, or
crafted. The renderers trust the shapes they read, so report.json is checked
first and a wrong field is named (``faults[0].metrics.regain_s: expected a
finite number or null, got 'fast'``) instead of surfacing as a traceback
somewhere in the HTML code. Unknown keys are allowed (additive schema).

Every JSON file the toolkit writes goes through ``dumps``: NaN and infinities
(never valid JSON, though Python writes them) become null.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from elastic_chaos.analysis.metrics import Metric
from elastic_chaos.analysis.registry import fault_groups, run_groups
from elastic_chaos.errors import SpecError

Check = Callable[[Any], bool]


class ReportUnreadable(SpecError):
    """report.json cannot be read as a run's report (a folder in its place, not UTF-8, not JSON,
    nested too deep, not an object, or a field of the wrong type); the message names the file,
    the line where one is known, and why."""


class ReportInvalid(ReportUnreadable):
    """report.json has a field of the wrong type; the message names it."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt(check: Check) -> Check:
    return lambda v: v is None or check(v)


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _list_of(check: Check) -> Check:
    return lambda v: isinstance(v, list) and all(check(x) for x in v)


def _dict(v: Any) -> bool:
    return isinstance(v, dict)


NUMBER, OPT_NUMBER, OPT_TEXT = _number, _opt(_number), _opt(_text)
TOP: dict[str, tuple[Check, str]] = {
    "scenario": (OPT_TEXT, "a string or null"),
    "platform": (OPT_TEXT, "a string or null"),
    "job": (_opt(_dict), "an object or null"),
    "verdict": (_opt(_dict), "an object or null"),
    "faults": (_opt(_list_of(_dict)), "a list of objects or null"),
    "goodput": (OPT_NUMBER, "a finite number or null"),
    "split_brain": (_opt(_list_of(_dict)), "a list of objects or null"),
    "samples": (_opt(_dict), "an object or null"),
    "observation": (_opt(_dict), "an object or null"),
    "started_at": (OPT_NUMBER, "a finite number or null"),
    "finished_at": (OPT_NUMBER, "a finite number or null"),
    "node_logs": (_opt(lambda v: _dict(v) and all(_text(x) for x in v.values())),
                  "an object of strings or null"),
    "placement": (_opt(lambda v: _dict(v) and _opt(_text)(v.get("note"))), "an object (its note a string) or null"),
    "threads": (_opt(lambda v: _dict(v) and _opt(_text)(v.get("advice"))), "an object (its advice a string) or null"),
    "clock_offsets": (_opt(lambda v: _dict(v) and all(_number(x) for x in v.values())),
                      "an object of numbers (node -> seconds) or null"),
    "log_utc_offset_s": (OPT_NUMBER, "a finite number (seconds) or null"),
    "final_state": (_opt(lambda v: _dict(v) and isinstance(v.get("equal"), bool)),
                    "an object (its equal a boolean) or null"),
}
VERDICT: dict[str, tuple[Check, str]] = {
    "passed": (_opt(lambda v: isinstance(v, bool)), "true, false or null"),
    "reasons": (_opt(_list_of(_text)), "a list of strings or null"),
    "checks": (_opt(_list_of(_dict)), "a list of objects or null"),
}
FAULT: dict[str, tuple[Check, str]] = {
    "kind": (_text, "a string"),
    "target": (OPT_TEXT, "a string or null"),
    "injected_at": (NUMBER, "a finite number"),
    "metrics": (_opt(_dict), "an object or null"),
}


def check_report(raw: Any, name: str = "report.json") -> None:
    """Raise ReportInvalid naming the first field of ``raw`` (report.json, parsed; ``name``
    says which file) whose type the renderers cannot use."""
    try:
        if not isinstance(raw, dict):
            raise ReportInvalid(f"expected a JSON object, got {_kind(raw)}")
        _fields(raw, TOP, "")
        if isinstance(raw.get("verdict"), dict):
            _fields(raw["verdict"], VERDICT, "verdict.")
        for g in run_groups():
            _block(raw, g.key, "", g.metrics)
        for i, fault in enumerate(raw.get("faults") or []):
            _fields(fault, FAULT, f"faults[{i}].", required=("kind", "injected_at"))
            for fg in fault_groups():
                _block(fault, fg.key, f"faults[{i}].", fg.metrics)
    except ReportInvalid as exc:
        raise ReportInvalid(f"{name}: {exc}") from None


def _fields(obj: dict[str, Any], spec: dict[str, tuple[Check, str]], where: str,
            required: tuple[str, ...] = ()) -> None:
    for key, (ok, expected) in spec.items():
        if key not in obj:
            if key in required:
                raise ReportInvalid(f"{where}{key} is missing (expected {expected})")
            continue
        if not ok(obj[key]):
            raise ReportInvalid(f"{where}{key}: expected {expected}, got {_show(obj[key])}")


METRICS_EXTRA: dict[str, tuple[Check, str]] = {
    "path": (OPT_TEXT, "a string or null"),
    "not_applicable": (_opt(lambda v: _dict(v) and all(_text(x) for x in v.values())),
                       "an object of strings or null"),
    "notes": (_opt(_list_of(_text)), "a list of strings or null"),
}


def _block(obj: dict[str, Any], key: str, where: str, metrics: Sequence[Metric]) -> None:
    """A metric group's block: an object (or null) whose declared metrics are numbers or null."""
    block = obj.get(key)
    if block is None:
        return
    if not isinstance(block, dict):
        raise ReportInvalid(f"{where}{key}: expected an object or null, got {_show(block)}")
    _metrics(block, f"{where}{key}.", metrics)


def _metrics(metrics: dict[str, Any], where: str, declared: Sequence[Metric]) -> None:
    for m in declared:
        if not m.phase and m.key in metrics and not OPT_NUMBER(metrics[m.key]):
            raise ReportInvalid(f"{where}{m.key}: expected a finite number or null, "
                                f"got {_show(metrics[m.key])}")
    _fields(metrics, METRICS_EXTRA, where)
    phases = metrics.get("phases")
    if phases is None:
        return
    if not isinstance(phases, dict):
        raise ReportInvalid(f"{where}phases: expected an object, got {_show(phases)}")
    for name, value in phases.items():
        if not OPT_NUMBER(value):
            raise ReportInvalid(f"{where}phases.{name}: expected a finite number or null, "
                                f"got {_show(value)}")


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), "a number")


def _show(v: Any) -> str:
    text = json.dumps(v, default=str) if not isinstance(v, float) else repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinity replaced by None (recursively)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON (RFC 8259): no NaN or Infinity, which Python's json writes by default."""
    return json.dumps(finite(obj), allow_nan=False, **kwargs)
