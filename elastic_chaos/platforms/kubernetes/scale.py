"""Hold a lost pod's replacement back, or keep it away, by scaling the job's Worker replicas.

On a cluster the controller re-creates a lost worker pod at once; what makes
a replacement slow (or impossible) in production is capacity: the autoscaler
needs minutes for a machine, or a spot pool has none. The local platform
models that with ``replace_lost_nodes`` / ``provisioning_delay_s``; here the
same options scale the job down just before the fault (the controller then
wants one pod fewer, so it does not replace the victim) and, after the delay,
back up (the controller creates the replacement). Both controllers drop the
highest replica index when scaled down, so the victim must be that one.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.platforms.kubernetes import manifests as m

log = logging.getLogger(__name__)


class JobScaler:
    """Patches the worker replicas of one job: ``<replica specs>.Worker.replicas`` of an operator's
    job object, ``spec.replicas`` of the statefulset kind's StatefulSet (``apps`` needed then)."""

    def __init__(self, custom: Any, settings: m.KubeSettings, run_id: str, replicas: int, *,
                 apps: Any = None) -> None:
        self.custom, self.apps, self.settings, self.run_id = custom, apps, settings, run_id
        self.replicas = replicas
        self._timers: list[threading.Timer] = []
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        """Victims checked and promised a hold-back whose scale-down is still to come (a hard
        loss scales down once the machine is dead): a fault aimed meanwhile (a cascade) is
        checked against the replicas there will be."""

    def claim(self, victim: str) -> None:
        """Check ``victim`` (InjectionFailed as :meth:`check_victim`) and count it as held back
        from now on; its :meth:`hold_back` follows, or :meth:`unclaim` when the fault failed."""
        with self._lock:
            self._check(victim, self.replicas - len(self._claimed))
            self._claimed.add(victim)

    def unclaim(self, victim: str) -> None:
        with self._lock:
            self._claimed.discard(victim)

    def hold_back(self, victim: str, delay_s: float | None, on_restore: Any = None) -> None:
        """Scale down by one so ``victim`` is not replaced; with ``delay_s``, scale back
        up after that long (``on_restore()`` is called then). A claimed victim was checked
        when it was claimed."""
        with self._lock:
            claimed = victim in self._claimed
            self._claimed.discard(victim)
        if not claimed:
            self.check_victim(victim)
        self.scale(self.replicas - 1)
        if delay_s is not None:
            timer = threading.Timer(delay_s, self._restore, args=(on_restore,))
            timer.daemon = True
            with self._lock:
                self._timers.append(timer)
            timer.start()

    def check_victim(self, victim: str) -> None:
        """InjectionFailed unless ``victim`` is the highest-index worker (the only one a scale-down keeps
        away), counting the victims claimed and not yet scaled down."""
        with self._lock:
            self._check(victim, self.replicas - len(self._claimed))

    def _check(self, victim: str, replicas: int) -> None:
        index = int(victim.rsplit("-", 1)[-1])
        if index != replicas - 1:
            raise InjectionFailed(f"holding back the replacement of {victim} needs the highest-index worker "
                                  f"({m.worker_pod_name(self.run_id, replicas - 1)}): the controller drops "
                                  "the highest index when scaled down. Aim the fault there or let it be replaced")

    def pending(self) -> bool:
        with self._lock:
            return any(t.is_alive() for t in self._timers)

    def cancel(self) -> None:
        with self._lock:
            for t in self._timers:
                t.cancel()
            self._timers.clear()

    def _restore(self, on_restore: Any) -> None:
        try:
            self.scale(self.replicas + 1)
            if on_restore is not None:
                on_restore()
        except Exception:  # a gone job at the end of a run: nothing to restore
            log.exception("could not scale %s back up", self.run_id)

    def scale(self, replicas: int) -> None:
        """Set the worker replicas; the controller then creates or deletes pods (blocks only for the PATCH)."""
        jk = self.settings.job_kind
        from elastic_chaos.platforms.kubernetes.actions import refused_loudly
        with refused_loudly(f"scaling {jk.kind} {self.run_id} to {replicas} workers"):
            if jk is m.JobKind.STATEFULSET:
                from elastic_chaos.platforms.kubernetes.statefulset import statefulset_name
                self.apps.patch_namespaced_stateful_set(statefulset_name(self.run_id), self.settings.namespace,
                                                        {"spec": {"replicas": replicas}}, _preload_content=False)
            else:
                group, version = jk.api_version.split("/")
                specs = "replicaSpecs" if jk is m.JobKind.ELASTICJOB else "pytorchReplicaSpecs"
                body = {"spec": {specs: {"Worker": {"replicas": replicas}}}}
                self.custom.patch_namespaced_custom_object(group, version, self.settings.namespace, jk.plural,
                                                           self.run_id, body, _preload_content=False)
        self.replicas = replicas
