"""Link faults on EKS: AWS FIS's pod network actions, asked of FIS and not measured here.

On EKS the toolkit owns no machine to put rules on; what can degrade the network of a
job's pods is AWS FIS: ``aws:eks:pod-network-latency`` (delay and jitter) and
``aws:eks:pod-network-packet-loss`` (a loss percentage), netem put on the pod's
interface by an ephemeral container that FIS starts as a Kubernetes service account.
So ``latency`` and ``packet-loss`` are one FIS experiment each, begun by
``degrade`` (template created, experiment started, running) and ended by
``restore`` (stopped, template deleted), through the platform's Guard: the safety
rules admit the template only inside the job's namespace and label selector, the
blast radius is checked on the one pod, and the cleanup journal owes both undos
until they are done. The FIS action's ``duration`` (EksOptions.fis_link_duration_s)
bounds the degradation should this process die before its revert.

"Between a node and its peers": FIS's ``sources`` limits the fault to the pod's
traffic with the given IPs/CIDRs, so the peers are given as their pod IPs (the
addresses the platform read from their pods' status). The target is the node's pod
alone (a label selector that singles it out among the job's pods); netem acts on that
pod's interface, so the delay is not added on the peers' side as the local platform
adds it each way.

What FIS has no pod action for is refused (FaultUnavailable, exit 2): a bandwidth cap,
a flapping link, the link to the rendezvous store, loss and delay at once, a delay set per
direction (``--reverse-delay-ms``, ``--reverse-jitter-ms``: FIS's delay is one netem on the
node's pod, one way) and a bursty loss (``--burst``: FIS's ``lossPercent`` is netem's
independent loss). The local platform and the local cluster (``make cluster-up``) make those.

Nothing probes the link here: the hit says the degradation was *asked of* AWS FIS
(``asked_of``) with no probe, and the report prints it as asked, never as measured.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from elastic_chaos.errors import FaultUnavailable, InjectionFailed
from elastic_chaos.platforms.aws.actions import (
    Begun,
    FisPods,
    pod_latency_template,
    pod_packet_loss_template,
)
from elastic_chaos.platforms.aws.clients import alarm_arn
from elastic_chaos.platforms.aws.guard import PodScope, check_blast_radius
from elastic_chaos.platforms.capabilities import Host, LinkDegrader
from elastic_chaos.platforms.nodes import Hit, NodeInfo

if TYPE_CHECKING:
    from elastic_chaos.platforms.aws.targets import AwsSide

ASKED_OF = "AWS FIS"
"""Who made the degradation, where nothing here measured it (the hit's ``asked_of``)."""
LOCAL_CLUSTER = ("make it on the local cluster instead (make cluster-up, then --platform kubernetes "
                 "--kubeconfig .cluster/kubeconfig), where the toolkit owns the machines and probes the link")
LOCAL_PLATFORM = "elastic-chaos run ... --platform local, root: each node its own network namespace"


class FisLinkOptions(Protocol):
    """The platform's options FisLinks reads (EksOptions has them; named here, not imported: eks.py
    imports this module)."""

    @property
    def cluster(self) -> str | None: ...

    @property
    def fis_service_account(self) -> str | None: ...

    @property
    def fis_link_duration_s(self) -> float: ...


class FisLinkHost(Host, Protocol):
    """What FisLinks asks of its platform (EksPlatform is one)."""

    aws_side: AwsSide

    @property
    def eks_options(self) -> FisLinkOptions: ...

    def alive_nodes(self) -> list[NodeInfo]: ...

    def fis_pods(self, node: str) -> tuple[FisPods, PodScope]:
        """The FIS pod target naming ``node``'s pod alone, and the job's pods (its scope)."""

    def pod_address(self, pod: str) -> str | None:
        """The pod's IP (None: not known yet)."""


def fis_refuses(*, loss: float, rate_kbit: int | None, down_s: float | None, up_s: float | None,
                delay_ms: float | None, to_store: bool, reverse_delay_ms: float | None = None,
                reverse_jitter_ms: float | None = None, burst: float | None = None) -> str | None:
    """Why FIS cannot make this degradation of a pod's link (None: it can)."""
    what = None
    if reverse_delay_ms is not None or reverse_jitter_ms is not None:
        what = ("a delay set per direction (--reverse-delay-ms, --reverse-jitter-ms; FIS's delay is one netem on "
                "the node's pod, one way, with no say over the other)")
    elif burst is not None:
        what = ("a bursty loss (--burst; FIS's lossPercent is netem's independent loss, with no "
                "Gilbert-Elliott state)")
    elif rate_kbit is not None:
        what = "a bandwidth cap"
    elif down_s is not None or up_s is not None:
        what = "a flapping link (down, up, over and over)"
    elif to_store:
        what = "degrading the link to the rendezvous store (--to-store)"
    elif loss and delay_ms is not None:
        what = "loss and delay on one link at once (FIS's two pod network actions must not run on one pod together)"
    elif not loss and delay_ms is None:
        what = "a link degradation with neither loss nor delay"
    if what is None:
        return None
    return (f"{what} is not made on EKS: AWS FIS has no such pod action (its pod network actions are "
            f"aws:eks:pod-network-latency, delay and jitter, and aws:eks:pod-network-packet-loss, a loss "
            f"percentage); {LOCAL_CLUSTER}" + (f"; or on the local platform ({LOCAL_PLATFORM})"
                                               if reverse_delay_ms is not None or reverse_jitter_ms is not None
                                               or burst is not None else ""))


def fis_links_missing(cluster: str | None, service_account: str | None, role_arn: str | None) -> str | None:
    """What link faults on EKS lack of the three settings FIS's pod actions need, in words
    naming each option and flag (None: nothing). Reads nothing: a game day asks it before any call."""
    missing = [what for what, value in (
        ("the EKS cluster's name or ARN (EksOptions.cluster, --eks-cluster)", cluster),
        ("the Kubernetes service account FIS acts as in the job's namespace (EksOptions.fis_service_account, "
         "--fis-service-account)", service_account),
        ("the IAM role FIS assumes (EksOptions.fis_role_arn, --fis-role-arn)", role_arn))
        if not value]
    if not missing:
        return None
    return ("link faults on EKS are AWS FIS experiments (aws:eks:pod-network-latency, "
            f"aws:eks:pod-network-packet-loss) and need {'; '.join(missing)}: docs/EKS.md, 'Link faults'")


class FisLinks(LinkDegrader):
    """Link faults on EKS as FIS experiments on the node's pod (see the module docstring)."""

    poll_s: float = 2.0
    """Seconds between two reads of an experiment's state while it starts and while it stops."""
    ready_timeout_s: float = 300.0
    """How long an experiment may take to run, and to stop (then InjectionFailed / RecoveryTimeout)."""

    def __init__(self, platform: FisLinkHost) -> None:
        super().__init__(platform)
        self.host = platform
        self._begun: dict[str, Begun] = {}

    def plan_steps(self, shape: dict[str, Any], node: str, who: str, until: str) -> tuple[str, ...] | None:
        """A FIS pod action, one way, asked and not probed: the plan says so instead of the local rules."""
        delay, loss = shape.get("delay_ms"), shape.get("loss")
        apart = {k: shape.get(k) for k in ("reverse_delay_ms", "reverse_jitter_ms", "burst")}
        if any(v is not None for v in apart.values()):
            # refused now, so that a dry run never lists what the run would refuse (the local words are not true here)
            raise FaultUnavailable(fis_refuses(loss=loss or 0.0, rate_kbit=None, down_s=None, up_s=None,
                                               delay_ms=delay, to_store=False, **apart) or "")
        if delay is not None:
            jitter = f" +- {shape.get('jitter_ms') or 0:g} ms" if shape.get("jitter_ms") else ""
            what = f"ask AWS FIS to delay every packet {delay:g} ms{jitter} (aws:eks:pod-network-latency)"
        elif loss:
            what = f"ask AWS FIS to drop {loss:.0%} of the packets (aws:eks:pod-network-packet-loss)"
        else:
            return None   # refused at injection (fis_refuses says why)
        return (f"{what} on {node}'s pod interface, for its traffic with {who}, {until}",
                "nothing probes the link on EKS: the degradation is reported as asked of AWS FIS, not measured",
                "stop the FIS experiment and delete its template")

    def unavailable(self) -> str | None:
        o = self.host.eks_options
        return fis_links_missing(o.cluster, o.fis_service_account, self.host.aws_side.fis_role_arn)

    def _degrade(self, node: str, peers: tuple[str, ...], *, loss: float, rate_kbit: int | None,
                 down_s: float | None, up_s: float | None, delay_ms: float | None, jitter_ms: float,
                 to_store: bool, reverse_delay_ms: float | None = None, reverse_jitter_ms: float | None = None,
                 burst: float | None = None) -> Hit:
        """Begin the FIS experiment on ``node``'s pod for its traffic with ``peers``' pod IPs
        (every other live pod's when empty); returns once FIS says it runs."""
        refused = fis_refuses(loss=loss, rate_kbit=rate_kbit, down_s=down_s, up_s=up_s, delay_ms=delay_ms,
                              to_store=to_store, reverse_delay_ms=reverse_delay_ms,
                              reverse_jitter_ms=reverse_jitter_ms, burst=burst) or self.unavailable()
        if refused:
            raise FaultUnavailable(refused)
        alive = [n.name for n in self.host.alive_nodes()]
        peers = peers or tuple(n for n in alive if n != node)
        if not peers or node in peers:
            raise InjectionFailed(f"{node} has no live peer to degrade its link to" if not peers
                                  else f"{node} cannot be its own peer")
        sources = self._sources(peers)
        target, scope = self.host.fis_pods(node)
        side = self.host.aws_side
        check_blast_radius([node], alive, side.limits)
        o = self.host.eks_options
        alarm = alarm_arn(side.clients.cloudwatch, side.stop_alarm) if side.stop_alarm else None
        if delay_ms is not None:
            template = pod_latency_template(target, delay_ms=delay_ms, jitter_ms=jitter_ms, sources=sources,
                                            duration_s=o.fis_link_duration_s,
                                            service_account=o.fis_service_account or "",
                                            role_arn=side.fis_role_arn or "", run_id=side.actions.run_id,
                                            stop_alarm_arn=alarm)
        else:
            template = pod_packet_loss_template(target, loss=loss, sources=sources, duration_s=o.fis_link_duration_s,
                                                service_account=o.fis_service_account or "",
                                                role_arn=side.fis_role_arn or "", run_id=side.actions.run_id,
                                                stop_alarm_arn=alarm)
        begun = side.actions.begin_experiment(template, pods=scope, ready_timeout_s=self.ready_timeout_s,
                                              poll_s=self.poll_s)
        self._begun[begun.experiment_id] = begun
        action = next(iter(template["actions"].values()))
        return Hit(node=node, at=begun.started_at, action=f"fis:{action['actionId']}", detail={
            "link": begun.experiment_id, "peers": list(peers), "probed": None, "probe": None, "baseline": None,
            "asked_of": ASKED_OF, "fis": {"template": begun.template_id, "experiment": begun.experiment_id,
                                          "status": begun.status, "parameters": action["parameters"],
                                          "selector": target.selector, "namespace": target.namespace}})

    def _sources(self, peers: tuple[str, ...]) -> tuple[str, ...]:
        addresses = {p: self.host.pod_address(p) for p in peers}
        unknown = [p for p, a in addresses.items() if not a]
        if unknown:
            raise InjectionFailed(f"no pod IP known for {', '.join(unknown)}: FIS's sources name the peers by "
                                  "their pod IPs (is the pod running?)")
        v6 = [p for p, a in addresses.items() if ":" in str(a)]
        if v6:
            raise FaultUnavailable(f"{', '.join(v6)} have IPv6 pod addresses; FIS's sources take IPv4 addresses "
                                   "and CIDR blocks")
        return tuple(f"{a}/32" for a in addresses.values())

    def _restore(self, node: str, link: str) -> Hit:
        """Stop the experiment ``link`` (unless FIS ended it already) and delete its template.
        Idempotent: a link not begun here, or already restored, is nothing to restore."""
        begun = self._begun.get(link)
        if begun is None:
            return Hit(node=node, at=time.time(), action="nothing-to-restore")
        status = self.host.aws_side.actions.end_experiment(begun, timeout_s=self.ready_timeout_s, poll_s=self.poll_s)
        del self._begun[link]   # kept until it ended: a failed stop can be retried (the journal owes it too)
        return Hit(node=node, at=time.time(), action="fis:stop-experiment" if begun.stopped else "fis:ended-itself",
                   detail={"link": link, "status": status, "template_deleted": begun.template_id})
