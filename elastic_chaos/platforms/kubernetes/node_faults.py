"""The Kubernetes platform's faults below the API: machines lost, cut off or hung, spot notices,
a worker killed inside its pod, etcd stopped, capacity added.

- **kill-node** where the machines are ours to operate (elastic_chaos.platforms.kubernetes.machines;
  the local cluster): the machine under the pod is lost (kubelet, runtime and every container
  die at once, its Node object goes), the node pool asks for a replacement machine after the
  provisioning delay, and the controller re-creates the pod once the cluster has let go of the
  old one (the pod garbage collector: 40-80 s for a pod on a deleted Node). Graceful (a spot
  interruption's end): the node-termination handler's part first (cordon, evict the job's pods
  on it: SIGTERM, emergency checkpoints), then the machine goes. Elsewhere: the pod is deleted
  (grace 0, or gracefully), the only loss the API can make.
- **partition** / **freeze**: the machine's link down / its processes frozen (machines' owner).
- **spot notices**: the instance-metadata stand-in (elastic_chaos.platforms.kubernetes.notices) where
  pods can reach this machine, keyed by the machine the asking pod runs on.
- **worker-crash**, **hung-rank**, **etcd-outage**: commands run in the pod
  (elastic_chaos.platforms.kubernetes.podexec): any cluster that allows ``pods/exec``.
- **packet-loss**, **latency**, **bandwidth**, **flapping-link**: the link between the machines
  under the pods degraded (elastic_chaos.platforms.kubernetes.links; the local cluster).
- **straggler**: the machine under the pod frozen and thawed several times a second
  (elastic_chaos.platforms.slowdown's duty cycle over the machines' owner's switch; the local cluster).
- **scale-up**: one more replica, and a machine for it when none is free and we can add one.
"""
from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

from elastic_chaos.errors import FaultUnavailable, InjectionFailed, PlatformError
from elastic_chaos.events import NodeEv, Timeline
from elastic_chaos.events.node_events import Lost
from elastic_chaos.platforms import capabilities as caps
from elastic_chaos.platforms.api import Hit, NodeInfo, NodeState
from elastic_chaos.platforms.capabilities import StoreOutage
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes import podexec
from elastic_chaos.platforms.kubernetes.actions import ClusterActions
from elastic_chaos.platforms.kubernetes.links import MachineLinks
from elastic_chaos.platforms.kubernetes.machines import MachineOp, Machines
from elastic_chaos.platforms.kubernetes.notices import NoticeServer, port_range
from elastic_chaos.platforms.kubernetes.options import KubernetesOptions
from elastic_chaos.platforms.kubernetes.pods import MachineTracker, PodTracker
from elastic_chaos.platforms.kubernetes.profile import ClusterProfile
from elastic_chaos.platforms.kubernetes.scale import JobScaler
from elastic_chaos.platforms.kubernetes.watch import api_status, read_json
from elastic_chaos.platforms.slowdown import Slowdowns
from elastic_chaos.spec import JobSpec
from elastic_chaos.waiting import eventually

log = logging.getLogger(__name__)


class FaultHost(Protocol):
    """What node faults need of their platform (KubernetesPlatform is one): its view of the
    cluster, the API calls it makes, the machines' owner, and the job it runs."""

    name: str
    timeline: Timeline
    options: KubernetesOptions
    settings: m.KubeSettings
    profile: ClusterProfile | None
    core: Any
    actions: ClusterActions
    pods: PodTracker
    machines: MachineTracker
    machine_ops: Machines
    notices: NoticeServer | None
    job: JobSpec | None
    _scaler: JobScaler | None

    def etcd_endpoint(self) -> str | None: ...

    def pods_on(self, machine: str) -> list[str]: ...

    def alive_nodes(self) -> list[NodeInfo]: ...

    def machine_of(self, pod: str) -> str: ...

    def delete_pod_hit(self, pod: str, *, grace_s: int, uid: str | None) -> Hit: ...

    def hold_back(self, node: str) -> None: ...

    def pool_lost(self, machine: str, pod: str | None) -> None: ...


class NodeFaults:
    """The faults of one Kubernetes platform that need more than a pod or Node API call."""

    def __init__(self, platform: FaultHost) -> None:
        self.p = platform
        self._cut: dict[str, str] = {}        # node -> machine, partitioned
        self._frozen: dict[str, str] = {}     # node -> machine, frozen
        self._hung: dict[int, tuple[str, str]] = {}   # worker PID (in its pod) -> (pod, its start time)
        self.slowdowns = Slowdowns()
        self.links = MachineLinks(platform)
        self._store: StoreOutage | None = None

    # -- what can be done here ------------------------------------------------------------
    def unavailable(self, capability: type[caps.Capability]) -> str | None:
        """Why ``capability`` cannot be made on this cluster here and now (None: it can)."""
        p = self.p
        if capability is caps.Partitioner:
            return p.machine_ops.unavailable(MachineOp.PARTITION)
        if capability is caps.Freezer:
            return p.machine_ops.unavailable(MachineOp.FREEZE)
        if capability is caps.Slower:
            return p.machine_ops.unavailable(MachineOp.SLOW)
        if capability is caps.LinkDegrader:
            return self.links.unavailable()
        if capability is caps.NoticeSender and not self.metadata_address():
            return ("spot notices need an instance-metadata stand-in the pods can reach: pass --metadata-address "
                    "HOST[:PORTS] (this machine's address on the pods' network; the local cluster's profile has it)")
        if capability is caps.StoreStopper and not p.settings.etcd_shell:
            return (f"stopping etcd runs a command in its pod, and the etcd image ({p.settings.etcd_image}) has no "
                    "shell (quay.io/coreos/etcd 3.5 is distroless): use an etcd image with /bin/sh and etcd_shell=True")
        if capability is caps.StoreHost and p.settings.job_kind is m.JobKind.STATEFULSET and not p.settings.dns:
            return ("a c10d store on a statefulset is named by worker-0's DNS name, and this cluster has no "
                    "DNS (a re-created worker-0 gets a new IP): run c10d where CoreDNS runs, or with a job operator")
        return None

    def metadata_address(self) -> str | None:
        """HOST[:PORTS] of the spot-notice stand-in: the option, else the cluster profile's."""
        p = self.p
        if p.options.metadata_address:
            return p.options.metadata_address
        prof = p.profile
        if prof is not None and prof.metadata_address:
            low, high = prof.metadata_ports or (0, 0)
            return f"{prof.metadata_address}:{low}-{high}"
        return None

    # -- kill-node --------------------------------------------------------------------------
    def kill_node(self, node: str, *, graceful: bool, grace_s: float) -> Hit:
        """Lose the machine under ``node`` where we operate the machines, else delete the pod.
        Blocks until the machine is gone (or the pod is)."""
        p = self.p
        info = p.pods.get(node)
        machine = info.labels.get("machine") if info else None
        if machine and p.machine_ops.unavailable(MachineOp.LOSE) is None:
            return self._lose_machine(node, machine, graceful=graceful, grace_s=grace_s)
        p.hold_back(node)
        return p.delete_pod_hit(node, grace_s=max(1, round(grace_s)) if graceful else 0, uid=None)

    def _lose_machine(self, node: str, machine: str, *, graceful: bool, grace_s: float) -> Hit:
        p = self.p
        claim = p._scaler if not p.options.replace_lost_nodes else None
        if claim is not None:
            # before anything is hit: only the newest can be held back, counting a loss whose
            # scale-down is still to come (a cascade armed on the first loss fires within ms)
            claim.claim(node)
        try:
            return self._lose_claimed(node, machine, graceful=graceful, grace_s=grace_s)
        finally:
            if claim is not None:
                claim.unclaim(node)   # held back by now, or the loss failed: no longer pending either way

    def _lose_claimed(self, node: str, machine: str, *, graceful: bool, grace_s: float) -> Hit:
        p = self.p
        pods = p.pods_on(machine)
        replace = p.options.replace_lost_nodes
        for pod in pods:
            p.pods.expect_loss(pod)
        action = "machine-lost"
        detail: dict[str, Any] = {"machine": machine, "pods": pods}
        if graceful:
            at = time.time()
            p.actions.set_unschedulable(machine, True)      # the termination handler: cordon, then drain
            if not replace and p._scaler is not None:
                p._scaler.hold_back(node, None)
            ended = all(self._evict_and_wait(pod, grace_s) for pod in pods)
            action = "sigterm" if ended else "sigterm-then-sigkill"
            detail.update(grace_s=grace_s, exited_within_grace_s=round(time.time() - at, 3) if ended else None)
            p.machine_ops.lose(machine)
        else:
            # from here on the pods count as lost, so a fault armed meanwhile (a cascade) aims elsewhere
            for pod in pods:
                p.pods.mark_lost(pod)
            scaler = p._scaler if not replace else None
            # the controller must not bring the pod back: scaled down once the machine's processes are
            # dead and before its Node goes. Scaled down before the kill, the controller's graceful
            # delete could reach the kubelet first: under load the victim got SIGTERM and saved an
            # emergency checkpoint of a "hard" loss (a cluster run lost 0 steps for it)
            at = p.machine_ops.lose(machine, once_dead=(lambda: scaler.hold_back(node, None)) if scaler else None)
        for pod in pods:
            p.pods.mark_lost(pod)
            if pod != node:
                p.timeline.emit(NodeEv.LOST, pod, Lost(action=action, machine=machine), t=at)
        p.pool_lost(machine, node)
        return Hit(node=node, at=at, action=action, detail=detail)

    def _evict_and_wait(self, pod: str, grace_s: float) -> bool:
        """Evict ``pod`` with ``grace_s`` (SIGTERM, SIGKILL after it); True once its container
        ended (or the pod is gone) within the grace period."""
        p = self.p
        grace = max(1, round(grace_s))
        try:
            p.actions.evict_pod(pod, grace_s=grace)
        except InjectionFailed as exc:
            if "HTTP 404" not in str(exc):
                raise
            return True
        def ended() -> bool:
            obj = p.actions.get_pod(pod)
            return obj is None or _container_ended(obj) or self._ended_on_machine(obj)

        return eventually(ended, timeout_s=grace + 2.0, interval_s=0.2)

    def _ended_on_machine(self, obj: m.Manifest) -> bool:
        """The machine shows no process of the pod's containers left (its sandbox's pause aside).
        Evidence where the machines can be looked into: the kubelet's status of an evicted pod
        can come long after its container ended."""
        uid = (obj.get("metadata") or {}).get("uid")
        machine = (obj.get("spec") or {}).get("nodeName")
        if not uid or not machine:
            return False
        procs = self.p.machine_ops.pod_processes(str(machine), str(uid))
        return procs is not None and not [c for c in procs.values() if c != "pause"]

    def kill_plan(self, node: str, *, graceful: bool) -> tuple[str, ...]:
        """What kill_node will do to ``node`` here, in words (a fault's dry run)."""
        p = self.p
        info = p.pods.get(node)
        machine = info.labels.get("machine") if info else None
        if machine and p.machine_ops.unavailable(MachineOp.LOSE) is None:
            steps = [f"lose machine {machine} under {node}: its kubelet, runtime and containers die at once, "
                     "its Node is deleted"]
            if graceful:
                steps.insert(0, f"cordon {machine}; evict {node} (SIGTERM; SIGKILL after the grace period)")
            if p.options.replace_lost_nodes:
                steps.append(f"a replacement machine joins after {p.options.provisioning_delay_s or 0:g}s")
            return tuple(steps)
        return (f"DELETE pod {p.settings.namespace}/{node} with grace {'the grace period' if graceful else '0'}",)

    # -- silent nodes ---------------------------------------------------------------------------
    def partition(self, node: str, *, on: bool) -> Hit:
        """Link of the machine under ``node`` down (``on``) or up again (idempotent heal)."""
        return self._toggle(node, on, self._cut, self.p.machine_ops.partition, ("link-down", "link-up"))

    def freeze(self, node: str, *, on: bool) -> Hit:
        """Every process of the machine under ``node`` frozen (``on``) or thawed (idempotent thaw)."""
        return self._toggle(node, on, self._frozen, self.p.machine_ops.freeze, ("machine-frozen", "machine-thawed"))

    def _toggle(self, node: str, on: bool, held: dict[str, str], op: Callable[..., float],
                actions: tuple[str, str]) -> Hit:
        if on:
            machine = self.p.machine_of(node)
            at = op(machine, on=True)
            held[node] = machine
            return Hit(node=node, at=at, action=actions[0], detail={"machine": machine})
        machine_or_none = held.pop(node, None)
        if machine_or_none is None:
            return Hit(node=node, at=time.time(), action="nothing-to-undo")
        if machine_or_none not in self.p.machines.names():
            return Hit(node=node, at=time.time(), action="machine-gone", detail={"machine": machine_or_none})
        at = op(machine_or_none, on=False)
        return Hit(node=node, at=at, action=actions[1], detail={"machine": machine_or_none})

    # -- spot notices -----------------------------------------------------------------------------
    def start_notices(self) -> NoticeServer | None:
        """The metadata stand-in for this run, where pods can reach it (None: notices unavailable)."""
        address = self.metadata_address()
        if not address:
            return None
        host = address.partition(":")[0]
        return NoticeServer(host, port_range(address), self._machine_of_address).start()

    def _machine_of_address(self, ip: str) -> str | None:
        for n in self.p.pods.nodes():
            if n.labels.get("address") == ip:
                return n.labels.get("machine")
        return None

    def send_notice(self, node: str, kind: str, *, terminate_at: float) -> Hit:
        p = self.p
        if p.notices is None:
            raise FaultUnavailable(self.unavailable(caps.NoticeSender) or "the spot-notice stand-in is not running")
        machine = p.machine_of(node)
        at = time.time()
        if kind == "rebalance":
            p.notices.recommend_rebalance(machine, at)
        elif kind == "interruption":
            p.notices.announce_interruption(machine, terminate_at)
        else:
            raise InjectionFailed(f"unknown notice {kind!r}: rebalance or interruption")
        return Hit(node=node, at=at, action=f"notice-{kind}", detail={"machine": machine})

    # -- inside the pods ------------------------------------------------------------------------
    def kill_worker(self, node: str, *, local_rank: int) -> Hit:
        at = time.time()
        done = self._in_worker_pod(node, podexec.kill_worker_command(local_rank), local_rank=local_rank)
        if done.code != 0:
            raise InjectionFailed(f"killing the worker on {node} failed ({done.code}): {done.err.strip()[:300]}")
        pids = tuple(int(w) for w in done.out.split() if w.isdigit())
        return Hit(node=node, at=at, action="sigkill-worker", pids=pids, detail={"in_pod": True})

    def hang_worker(self, node: str, *, local_rank: int) -> Hit:
        """SIGSTOP the worker with ``local_rank`` inside ``node``'s pod; the hit is a stopped worker."""
        at = time.time()
        done = self._in_worker_pod(node, podexec.hang_worker_command(local_rank), local_rank=local_rank)
        if done.code == 5:
            raise InjectionFailed(f"the worker {done.out.strip()} in {node} was sent SIGSTOP and did not stop")
        words = done.out.split()
        if done.code != 0 or len(words) != 2 or not words[0].isdigit():
            raise InjectionFailed(f"hanging the worker in {node} failed ({done.code}): "
                                  f"{(done.err or done.out).strip()[:300]}")
        pid = int(words[0])
        self._hung[pid] = (node, words[1])
        return Hit(node=node, at=at, action="sigstop-worker", pids=(pid,), detail={"in_pod": True})

    def resume_worker(self, node: str, pid: int) -> Hit:
        """SIGCONT the worker this run hung if it is still that process (idempotent; a gone pod
        or a worker its agent replaced is nothing to resume)."""
        known = self._hung.pop(pid, None)
        at = time.time()
        if known is None:
            return Hit(node=node, at=at, action="nothing-to-resume", pids=(pid,))
        pod, started = known
        try:
            done = self._in_worker_pod(pod, podexec.resume_worker_command(pid, started))
        except InjectionFailed as exc:
            if "HTTP 404" in str(exc) or "HTTP 400" in str(exc):   # the pod is gone, or not running
                return Hit(node=node, at=at, action="nothing-to-resume", pids=(pid,))
            raise
        resumed = done.code == 0 and "resumed" in done.out
        return Hit(node=node, at=at, action="sigcont-worker" if resumed else "nothing-to-resume", pids=(pid,))

    def _in_worker_pod(self, pod: str, script: str, *, local_rank: int | None = None) -> podexec.ExecResult:
        """Run ``script`` in the pod's worker container; with ``local_rank``, its exit code 3
        (the podexec commands' "no such worker") is an InjectionFailed that says so."""
        p = self.p
        done = podexec.exec_in(p.core, p.settings.namespace, pod, p.settings.job_kind.container, script)
        if local_rank is not None and done.code == 3:
            raise InjectionFailed(f"{pod} has no worker with LOCAL_RANK={local_rank} right now (restarting?)")
        return done

    def slow(self, node: str, *, factor: float, period_s: float) -> Hit:
        """Run the machine under ``node`` at 1/``factor`` of its speed until ``restore``."""
        machine = self.p.machine_of(node)
        hit = self.slowdowns.start(node, factor, period_s, self.p.machine_ops.slow_switch(machine))
        return Hit(node=node, at=hit.at, action=hit.action, detail={**hit.detail, "machine": machine})

    def restore(self, node: str) -> Hit:
        return self.slowdowns.restore(node)

    def release_all(self) -> list[str]:
        """Teardown: every slowed machine at full speed again, every degraded link whole, every hung
        worker continued; returns what could not be undone."""
        errors = self.slowdowns.restore_all() + self.links.release_all()
        for pid, (pod, _) in list(self._hung.items()):
            try:
                self.resume_worker(pod, pid)
            except InjectionFailed as exc:
                errors.append(str(exc))
        return errors

    def stop_store(self, how: StoreOutage) -> Hit:
        pod = self._etcd_pod_name()
        at = time.time()
        done = self._etcd_exec(pod, podexec.etcd_stop_command(hang=how is StoreOutage.HANG))
        self._store = how
        action = "sigstop" if how is StoreOutage.HANG else "sigkill"
        return Hit(node="etcd", at=at, action=action,
                   pids=tuple(int(w) for w in done.out.split() if w.isdigit()), detail={"pod": pod})

    def start_store(self) -> Hit:
        """Let etcd run again (its data kept) and block until it answers; idempotent."""
        if self._store is None:
            return Hit(node="etcd", at=time.time(), action="nothing-to-restart")
        pod = self._etcd_pod_name()
        at = time.time()
        self._etcd_exec(pod, podexec.etcd_resume_command())
        self._store = None
        self._wait_etcd_serves(30.0)
        return Hit(node="etcd", at=at, action="resumed", detail={"pod": pod})

    def _etcd_pod_name(self) -> str:
        p = self.p
        if p.job is None or not p.job.rdzv.backend.needs_etcd():
            raise InjectionFailed("this job has no etcd (its rendezvous backend is c10d)")
        pods = read_json(p.core.list_namespaced_pod(p.settings.namespace, _preload_content=False,
                                                    label_selector=m.run_selector(p.job.run_id, "etcd")))
        live = [i for i in pods.get("items") or [] if (i.get("status") or {}).get("phase") == "Running"]
        if not live:
            raise InjectionFailed(f"no running etcd pod for {p.job.run_id}")
        return str(live[0]["metadata"]["name"])

    def _etcd_exec(self, pod: str, script: str) -> podexec.ExecResult:
        done = podexec.exec_in(self.p.core, self.p.settings.namespace, pod, "etcd", script)
        if done.code not in (0, None):
            raise InjectionFailed(f"in etcd pod {pod}: `{script}` failed ({done.code}): {done.err.strip()[:300]}")
        return done

    def _wait_etcd_serves(self, timeout_s: float) -> None:
        endpoint = self.p.etcd_endpoint()

        def serves() -> bool:
            try:
                with urllib.request.urlopen(f"http://{endpoint}/v2/keys/?quorum=false", timeout=2):
                    return True
            except OSError:
                return False

        if not eventually(serves, timeout_s=timeout_s, interval_s=0.2):
            raise PlatformError(f"etcd at {endpoint} did not answer within {timeout_s:.0f}s of being resumed")

    # -- capacity ---------------------------------------------------------------------------------
    def add_node(self) -> NodeInfo:
        """One more worker: a machine first when none is free (and we can add one), then one more
        replica; blocks until its pod runs."""
        p = self.p
        if p._scaler is None or p.job is None:
            raise PlatformError("no job is running")
        replicas = p._scaler.replicas + 1
        self.ensure_capacity(replicas, headroom=0)
        name = m.worker_pod_name(p.job.run_id, replicas - 1)
        before = p.pods.get(name)
        p._scaler.scale(replicas)
        def running() -> NodeInfo | None:
            info = p.pods.get(name)
            if info is not None and info is not before and info.state is NodeState.RUNNING \
                    and (before is None or info.labels.get("uid") != before.labels.get("uid")):
                return info
            return None

        found = eventually(running, timeout_s=p.options.start_timeout_s, interval_s=0.2)
        if found is None:
            raise PlatformError(f"{name} was not running {p.options.start_timeout_s:.0f}s after scaling up: "
                                f"{p.pods.describe()}")
        return found

    def ensure_capacity(self, workers: int, *, headroom: int = 1) -> list[str]:
        """The cluster-autoscaler's scale-up for pending pods: where we can add machines, add
        until ``workers`` schedulable machines for the job's pods exist (one pod each), plus
        ``headroom`` free ones (where a drained or evicted pod is rescheduled, as a cluster keeps
        spare capacity). Returns the machines added (none on other clusters)."""
        p = self.p
        if p.machine_ops.unavailable(MachineOp.ADD) is not None or not p.settings.one_pod_per_node:
            return []
        missing = workers + headroom - len(self._worker_machines())
        return p.machine_ops.add_many(missing) if missing > 0 else []

    def _worker_machines(self) -> list[str]:
        """Ready, schedulable machines the job's worker pods may run on (by node selector)."""
        p = self.p
        try:
            nodes = read_json(p.core.list_node(_preload_content=False)).get("items") or []
        except Exception as exc:
            if api_status(exc) == 403:
                return []
            raise
        want = dict(p.settings.node_selector)
        fit = []
        for n in nodes:
            labels = (n.get("metadata") or {}).get("labels") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (n.get("status") or {}).get("conditions") or [])
            if ready and not (n.get("spec") or {}).get("unschedulable") \
                    and all(labels.get(k) == v for k, v in want.items()):
                fit.append(str(n["metadata"]["name"]))
        return fit


def _container_ended(pod: m.Manifest) -> bool:
    """Every container of the pod has terminated (it is on its way out)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all("terminated" in (st.get("state") or {}) for st in statuses)
