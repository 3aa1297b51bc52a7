"""bench/results.json and what is written from it: the findings, the shipped figures, the plots, RESULTS.md.

Every path that changes results.json -- a measurement (`python -m bench`), a merge, ``--render``, a soak, a
record of figures measured elsewhere (bench/nccl_runs.py, bench/other_cores.py) -- goes through here, so
RESULTS.md is always rendered from the results.json beside it by the one writer (bench/render). The
findings are derived from the figures on every :func:`write` (a newer bench explains older figures too).
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import limits, store_model
from bench.findings import recovery_findings, scale_findings
from bench.local_nodes import NodesRun
from bench.rdzv import shipped
from bench.rdzv.section import RdzvSection
from bench.render import Plots, plots, write_markdown

RESULTS = "results.json"
MARKDOWN = "RESULTS.md"


def write_json(results: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(results, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    """results.json at ``path``; raises OSError or ValueError when it cannot be read."""
    results = json.loads(path.read_text())
    if not isinstance(results, dict):
        raise ValueError(f"{path} holds no JSON object")
    return results


def read_results(out: Path, who: str, advice: str) -> dict[str, Any] | None:
    """OUT/results.json, or None after saying on stderr why it cannot be read and what to do."""
    path = out / RESULTS
    try:
        return read_json(path)
    except (OSError, ValueError) as e:
        print(f"{who}: cannot read {path}: {e}; {advice}", file=sys.stderr)
        return None


def derive(results: dict[str, Any], say: Callable[[str], None]) -> None:
    """The findings, and the rendezvous figures the toolkit ships (saved to elastic_chaos/scale/measured.json), from
    the figures in ``results`` (updated in place)."""
    limits.annotate(results)
    results["findings"] = recovery_findings(results)
    if "scale" in results:
        results["scale_findings"] = scale_findings([NodesRun.from_json(r) for r in results["scale"]])
    shipped.derive(results, say)
    store_model.derive(results)


def draw(out: Path, results: dict[str, Any]) -> Plots:
    """The plots beside RESULTS.md, drawn again (None: not drawn, e.g. without matplotlib)."""
    recovery = "recovery.png" if plots.recovery(results, out / "recovery.png") else None
    figs = RdzvSection.of(results).figures
    rdzv = "rdzv_scale.png" if figs is not None and plots.rdzv(figs, out / "rdzv_scale.png") else None
    return Plots(recovery, rdzv)


def drawn(out: Path) -> Plots:
    """The plots already beside RESULTS.md, left as they are."""
    return Plots(*(name if (out / name).exists() else None for name in ("recovery.png", "rdzv_scale.png")))


def write_files(out: Path, results: dict[str, Any], plots: Plots) -> None:
    """OUT/results.json and OUT/RESULTS.md, as ``results`` holds them."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(results, out / RESULTS)
    write_markdown(results, out / MARKDOWN, plots)


def write(out: Path, results: dict[str, Any], say: Callable[[str], None]) -> None:
    """Everything from ``results``: the findings and the shipped figures, the plots, results.json, RESULTS.md."""
    derive(results, say)
    out.mkdir(parents=True, exist_ok=True)
    write_files(out, results, draw(out, results))
    say(f"wrote {out / RESULTS} and {out / MARKDOWN}")


def record(out: Path, key: str, section: dict[str, Any], who: str, say: Callable[[str], None]) -> int:
    """Put ``section`` under ``key`` of OUT/results.json (every other figure kept) and re-render RESULTS.md:
    for figures measured elsewhere (bench/nccl_runs.py, bench/other_cores.py). 2 when there is none yet."""
    results = read_results(out, who, "run `make bench` first")
    if results is None:
        return 2
    results[key] = section
    write(out, results, say)
    return 0
