"""``--pushgateway URL`` of ``run``, ``report`` and ``gameday``: push a run's metrics after it.

The metrics are the folder's (chaos.reporting.prometheus, the same families as
its ``metrics.prom``), grouped by job ``elastic-chaos`` and the run's folder
name. A push that fails is said on stderr and makes the command exit 2 (a
setup error: the dashboard will not show the run), whatever the verdict.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chaos.reporting.run_report import RunReport

HELP = ("push the run's metrics (as metrics.prom) to this Prometheus Pushgateway, e.g. "
        "http://pushgateway:9091; grouped by job=elastic-chaos and run=<report folder name>")


def add_flag(parser: Any) -> None:
    parser.add_argument("--pushgateway", metavar="URL", help=HELP)


def push_report(report: RunReport, gateway: str | None) -> bool:
    """Push a run's metrics to ``gateway`` (nothing when it is None); False, said on stderr,
    when the push failed."""
    if not gateway:
        return True
    from chaos.reporting.prometheus import push
    try:
        push(report, gateway)
    except (OSError, ValueError) as exc:
        print(f"elastic-chaos: error: metrics of {report.folder} not pushed to {gateway}: {exc}", file=sys.stderr)
        return False
    print(f"metrics pushed to {gateway} (job=elastic-chaos, run={report.folder.resolve().name})")
    return True
