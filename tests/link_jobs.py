"""What the link-fault job tests share (tests/test_network_link_jobs.py, tests/test_network_timeout_jobs.py:
two modules, so that xdist's workers each take one)."""
from __future__ import annotations

from elastic_chaos.analysis.link import LINK
from elastic_chaos.events import NodeEv

STEADY_STEPS = 30


def cost_of(run):  # type: ignore[no-untyped-def]
    cost = run.result().faults[0].group(LINK)
    assert cost is not None
    # the revert removed every chain, queue and qdisc it made and found none left (LinkBook.restore checks)
    restored = run.timeline.select(NodeEv.LINK_RESTORED)
    assert [e.data.action for e in restored] == ["restored"]
    return cost

