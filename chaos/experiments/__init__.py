"""Ready-made experiments the CLI runs: each a hypothesis about one fault.

``EXPERIMENTS`` maps every fault name of ``elastic-chaos run FAULT`` to the
function that runs it.
"""
from __future__ import annotations

from collections.abc import Callable

from chaos.experiments.common import ExperimentOptions, default_report_dir
from chaos.experiments.growth import repeated, scale_up
from chaos.experiments.losses import (
    kill_during_checkpoint,
    kill_node,
    restarts_exhausted,
    store_host_loss,
    worker_crash,
)
from chaos.experiments.silent import etcd_outage, freeze, partition, spot_interruption
from chaos.runner.run import ChaosRun

Experiment = Callable[..., ChaosRun]

EXPERIMENTS: dict[str, tuple[Experiment, str]] = {
    "kill-node": (kill_node, "hard node loss: every process of one node killed at once (SIGKILL)"),
    "spot-interruption": (spot_interruption, "AWS spot reclaim: rebalance recommendation, notice, "
                                             "SIGTERM after the notice, SIGKILL after the grace period"),
    "partition": (partition, "network black hole around one node: no packet in or out, no reset (root)"),
    "freeze": (freeze, "hung node: every process of one node stopped at once; sockets stay open"),
    "worker-crash": (worker_crash, "one worker process of one node dies; the node stays"),
    "etcd-outage": (etcd_outage, "the rendezvous store is down for N seconds (--during-rendezvous: while "
                                 "survivors re-form after a kill), then returns with its data"),
    "scale-up": (scale_up, "a node joins mid-run; the job re-forms a larger world"),
    "kill-during-checkpoint": (kill_during_checkpoint, "hard kill of the node writing a checkpoint, while "
                                                       "it writes; restart must load the newest complete one"),
    "repeated": (repeated, "node kills as a Poisson process at a mean time between failures, with "
                           "replacement; reports goodput and every recovery"),
    "store-host-loss": (store_host_loss, "c10d backend: kill the node hosting the rendezvous TCPStore"),
    "restarts-exhausted": (restarts_exhausted, "more worker crashes than --max-restarts allows; the job "
                                               "fails permanently and the verdict says why"),
}

__all__ = ["EXPERIMENTS", "ExperimentOptions", "default_report_dir", "kill_node"]
