"""Pod deletion (at once, gracefully) and a node drain: what only a cluster does to a job.

The job's controller re-creates a deleted worker pod under its name, so every
one of these ends with the world at full size again; what differs is what the
pod could do on its way out. Force-deleted (grace 0) it does nothing: the
survivors resume from the last checkpoint. Deleted gracefully or evicted by a
drain it gets SIGTERM, and the reference trainer checkpoints first: nothing is
lost. A drained node is cordoned, so the new pod runs elsewhere.
"""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE, FAST_RDZV

pytestmark = [pytest.mark.slow, pytest.mark.platforms(
    "kubernetes", "kind", "eks", reason="pods and the controllers that re-create them exist only on a cluster")]


def test_a_force_deleted_pod_is_re_created_and_the_job_regrows(run_hypothesis):
    run_hypothesis("delete-pod", **CADENCE, **FAST_RDZV)


def test_a_gracefully_deleted_pod_checkpoints_on_its_way_out_and_loses_nothing(run_hypothesis):
    run_hypothesis("delete-pod-graceful", **CADENCE, grace_s=20, **FAST_RDZV)


def test_a_drained_nodes_worker_checkpoints_and_comes_back_on_another_node(run_hypothesis):
    run_hypothesis("drain-node", **CADENCE, **FAST_RDZV)
