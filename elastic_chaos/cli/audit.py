"""``elastic-chaos audit DIR...``: what recovery costs, per fault kind and platform, over many runs.

Each DIR is a run's report folder or a folder holding them (a CI history, a
game day's reports/). Prints one table per fault kind and platform (runs,
pass rate, p50/p95/max of each recovery phase and of lost steps, goodput, a
resilience score) and writes the same as HTML (and JSON beside it). With
``--baseline DIR...`` it flags regressions against that run set. Definitions
(nearest-rank percentiles, the score formula, regression rules): docs/REPORTS.md.

A folder whose report.json or timeline cannot be read (or that a usage error
stopped) is skipped and listed with why; a run that was not steady or that the
toolkit failed is listed apart; neither counts in a pass rate or score.

``--goodput-at-least`` and ``--max-cost-per-interruption`` gate CI (elastic_chaos.reporting.audits.gates):
each figure that breaks one is printed with its run.

Exit 0 when no regression was flagged and no gate broken, 1 when one was, 2 when no run was
found (or none could be read) or a value is bad (a gate out of range, a cost gate with no price).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, add_arguments, given, option, validate


@dataclass(frozen=True)
class AuditSettings:
    """How regressions are judged and faults scored (docs/REPORTS.md)."""

    tolerance: float = option(0.2, "a p50 more than this fraction above the baseline's is a regression",
                              minimum=0, maximum=100)
    min_delta: float = option(1.0, "...and at least this many seconds above it", minimum=0, maximum=DAY_S,
                              units="s")
    score_half: float = option(60.0, "regain seconds at which a fault scores 1/2", above=0, maximum=DAY_S,
                               units="s")

    def __post_init__(self) -> None:
        validate(self)


def register(sub: Any) -> None:
    p = sub.add_parser("audit", help="aggregate many runs: percentiles, pass rate, score, regressions",
                       description=__doc__ + "\nexamples:\n  elastic-chaos audit reports/\n"
                       "  elastic-chaos audit reports/release-2/ --baseline reports/release-1/ "
                       "--html audit.html\n"
                       "  elastic-chaos audit reports/nightly/ --goodput-at-least 0.95 "
                       "--instance-type p4d.24xlarge --max-cost-per-interruption 5\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="report folders, or folders holding them")
    p.add_argument("--baseline", nargs="+", type=Path, default=[], metavar="DIR",
                   help="report folders to compare against (regressions are flagged)")
    p.add_argument("--html", type=Path, default=Path("reports/audit.html"),
                   help="where to write the HTML (default reports/audit.html; audit.json beside it)")
    add_arguments(p, AuditSettings)
    from elastic_chaos.analysis.cost import CostBasis
    from elastic_chaos.reporting.audits.gates import Gates
    add_arguments(p.add_argument_group("CI gates (exit 1 naming the run and the figure)"), Gates)
    add_arguments(p.add_argument_group("price every interruption here (else: as each run was given)"), CostBasis)
    p.set_defaults(func=main)


def _summaries(paths: list[Path], what: str, basis: Any = None) -> tuple[list[Any], list[Any]]:
    """The runs under ``paths`` (priced with ``basis`` when given) and the folders skipped; SpecError when
    there is no run to audit."""
    from elastic_chaos.reporting.audits.audit import find_runs, survey
    folders = find_runs(paths)
    if not folders:
        raise SpecError(f"no report folder (report.json or timeline.jsonl) under {', '.join(map(str, paths))} "
                        f"for the {what}; run some experiments first (elastic-chaos run ... / pytest scenarios/)")
    runs, skipped = survey(folders, basis)
    if not runs:
        raise SpecError(f"no readable run under {', '.join(map(str, paths))} for the {what}: "
                        + "; ".join(s.reason for s in skipped[:5]) + (" ..." if len(skipped) > 5 else ""))
    return runs, skipped


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.analysis.cost import CostBasis
    from elastic_chaos.reporting.audits import audit, audit_view, replay_audit
    from elastic_chaos.reporting.audits.gates import Gates, breaches
    from elastic_chaos.reporting.schema import dumps
    judged = AuditSettings(**given(args, AuditSettings))
    args.tolerance, args.min_delta, args.score_half = judged.tolerance, judged.min_delta, judged.score_half
    gates = Gates(**given(args, Gates))
    cost = CostBasis(**given(args, CostBasis))
    basis = cost.recorded() if cost.given else None
    runs, skipped = _summaries(args.dirs, "audit", basis)
    baseline = _summaries(args.baseline, "baseline", basis)[0] if args.baseline else []
    broken = breaches(runs, gates)   # a gate with nothing to judge on is a usage error, before any output
    groups = audit.aggregate(runs)
    regressions = audit.compare(groups, audit.aggregate(baseline), tolerance=args.tolerance,
                                min_delta_s=args.min_delta, half_s=args.score_half) if baseline else []
    print(audit_view.render_text(runs, groups, baseline=baseline, regressions=regressions,
                                 half_s=args.score_half, skipped=skipped))
    replays = replay_audit.groups([r.folder for r in runs if r.judged])
    if replays:
        print(replay_audit.render_text(replays))
    html_path: Path = args.html
    json_path = html_path.with_suffix(".json")
    html = audit_view.render_html(runs, groups, html_path, baseline=baseline, regressions=regressions,
                                  half_s=args.score_half, skipped=skipped)
    doc = dumps({"runs": [str(r.folder) for r in runs if r.judged],
                 "apart": [{"folder": str(r.folder), "outcome": r.outcome.value if r.outcome else None,
                            "reason": r.why} for r in runs if not r.judged],
                 "skipped": [s.to_json() for s in skipped],
                 "baseline": [str(r.folder) for r in baseline],
                 "groups": [g.to_json(args.score_half) for g in groups],
                 "regressions": [r.describe() for r in regressions],
                 "gates": {"goodput_at_least": gates.goodput_at_least,
                           "max_cost_per_interruption": gates.max_cost_per_interruption,
                           "breaches": [b.to_json() for b in broken]},
                 "replays": [g.to_json() for g in replays]}, indent=2) + "\n"
    try:
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(html, encoding="utf-8")
        json_path.write_text(doc, encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot write the audit to {html_path} ({exc.strerror or exc}); pass --html PATH in "
                        "a folder you can write") from None
    print(f"\naudit: {html_path.resolve()}  (and {json_path.name})")
    for b in broken:
        print(f"gate broken: {b.describe()}")
    if gates.goodput_at_least is not None or gates.max_cost_per_interruption is not None:
        print(f"gates: {len(broken)} breach(es) in {sum(1 for r in runs if r.judged)} judged run(s)")
    return 1 if regressions or broken else 0
