"""The network between ranks (root, iptables; issue 39): 5 % loss each way is survived without a
restart, measured across the link (the probe), leaving no rule or qdisc behind. On the local platform
the link is between the two nodes' namespaces; on the local cluster (``--platform kubernetes
--kubeconfig .cluster/kubeconfig``) between the machines under node-0's and node-1's pods (their
worker pods ``<run>-worker-0`` and ``-1``); on a cluster whose machines are not ours it skips with the
reason. A capped, a delayed and a flapping link are tests/test_network_link_jobs.py, which takes the
same ``--platform`` (the catalog stays under ten minutes on a 2-core machine)."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

from elastic_chaos.analysis.link import LINK
from elastic_chaos.events import NodeEv

pytestmark = pytest.mark.slow


def _cost(run):  # type: ignore[no-untyped-def]
    cost = run.result().faults[0].group(LINK)
    assert cost is not None
    # the revert removed every chain, queue and qdisc it made and found none left (LinkBook.restore checks)
    restored = run.timeline.select(NodeEv.LINK_RESTORED)
    assert [e.data.action for e in restored] == ["restored"]
    return cost


def test_five_percent_loss_is_survived_without_a_restart(run_hypothesis):
    run = run_hypothesis("packet-loss", rate=0.05, between=("node-0", "node-1"), duration_s=10.0,
                         steady_steps=CADENCE["steady_steps"])
    cost = _cost(run)
    assert cost.loss_measured is not None and cost.restarts == 0
