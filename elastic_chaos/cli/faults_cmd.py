"""``elastic-chaos faults``: the catalog of hypotheses, and the faults each platform can make."""
from __future__ import annotations

import argparse
from typing import Any

DESCRIPTION = """List what `elastic-chaos run HYPOTHESIS` can run (each a hypothesis about one fault, on any
platform that can make that fault), then the faults each platform can make, for scenarios
and game days (`elastic-chaos gameday`).

example:
  elastic-chaos faults
  elastic-chaos faults --platform kubernetes
"""


def register(sub: Any) -> None:
    from elastic_chaos.platforms import PLATFORMS
    p = sub.add_parser("faults", help="list the faults with a one-line description each",
                       description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--platform", choices=sorted(PLATFORMS), help="only what this platform can make")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.faults.catalog import all_faults
    from elastic_chaos.hypotheses.catalog import HYPOTHESES, get
    from elastic_chaos.platforms import PLATFORMS
    get("kill-node")  # loads the catalog
    platforms = [args.platform] if args.platform else list(PLATFORMS)
    groups = [("elastic-chaos run HYPOTHESIS [--platform P] (docs/FAULTS.md)",
               {name: h.summary + _where(h.fault, platforms) for name, h in sorted(HYPOTHESES.items())})]
    by_place: dict[tuple[str, ...], dict[str, str]] = {}
    for c in all_faults():
        where = tuple(p for p in c.platforms if p in platforms)
        if where:
            by_place.setdefault(where, {})[c.name] = c.description
    for where, own in by_place.items():
        groups.append((f"made only on {', '.join(where)} (scenarios, elastic-chaos gameday)", own))
    width = max(len(name) for _, faults in groups for name in faults)
    for i, (title, faults) in enumerate(groups):
        print(("\n" if i else "") + title)
        for name, description in faults.items():
            print(f"  {name.ljust(width)}  {description}")
    return 0


def _where(kind: str | None, platforms: list[str]) -> str:
    """Where the hypothesis' fault can be made, when that is not everywhere."""
    from elastic_chaos.errors import SpecError
    from elastic_chaos.faults.catalog import fault_class
    if kind is None:
        return ""
    able = []
    for p in platforms:
        try:
            fault_class(kind, p)
            able.append(p)
        except SpecError:
            pass
    return "" if able == platforms else f" [{', '.join(able) or 'nowhere here'}]"
