"""Holding a lost pod's replacement back by scaling the job down (elastic_chaos/platforms/kubernetes/scale.py).

A cascade armed on the first loss fires within milliseconds, before that loss's scale-down (which
comes once the machine is dead): a cluster soak run saw the second victim refused as "not the
highest-index worker" against the replicas of before. The API is a recording stand-in here (the
PATCH bodies are what is checked); the cluster catalog's cascading-loss scenario runs it for real.
"""
from __future__ import annotations

from typing import Any

import pytest

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.platforms.kubernetes import manifests as m
from elastic_chaos.platforms.kubernetes.scale import JobScaler


class RecordingApps:
    def __init__(self) -> None:
        self.replicas: list[int] = []

    def patch_namespaced_stateful_set(self, name: str, namespace: str, body: dict[str, Any], **_: Any) -> None:
        self.replicas.append(body["spec"]["replicas"])


def scaler() -> tuple[JobScaler, RecordingApps]:
    apps = RecordingApps()
    return JobScaler(None, m.KubeSettings(job_kind=m.JobKind.STATEFULSET), "chaos-x", 3, apps=apps), apps


def test_a_cascade_aimed_before_the_first_loss_scaled_down_is_checked_against_the_replicas_to_be():
    s, apps = scaler()
    s.claim("chaos-x-worker-2")                 # the first loss: checked, its scale-down still to come
    s.claim("chaos-x-worker-1")                 # the cascade, within ms: the next highest is right
    s.hold_back("chaos-x-worker-2", None)       # the first machine dead: scaled down
    s.hold_back("chaos-x-worker-1", None)
    assert apps.replicas == [2, 1] and s.replicas == 1


def test_a_victim_that_is_not_the_highest_is_still_refused_and_a_failed_loss_gives_its_claim_back():
    s, apps = scaler()
    with pytest.raises(InjectionFailed, match="needs the highest-index worker \\(chaos-x-worker-2\\)"):
        s.claim("chaos-x-worker-1")
    s.claim("chaos-x-worker-2")
    s.unclaim("chaos-x-worker-2")               # that loss failed: nothing is pending any more
    with pytest.raises(InjectionFailed, match="chaos-x-worker-2"):
        s.check_victim("chaos-x-worker-1")
    assert apps.replicas == []
