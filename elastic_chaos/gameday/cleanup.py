"""Finish the rollbacks a crashed game day left open in the cleanup journal.

Every rollback a game day owes (stop a FIS experiment, delete a FIS template,
uncordon a node) is journalled *before* it is owed and closed once done
(:class:`~elastic_chaos.platforms.aws.guard.CleanupJournal`). After a crash, the next
game day -- or ``elastic-chaos cleanup`` -- replays the open entries, newest
first, each through the Guard (so each is audited). A target that is already
gone counts as undone. An entry whose undo fails stays open and is reported.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from elastic_chaos.errors import ChaosError, SetupError
from elastic_chaos.platforms.aws.actions import AwsActions
from elastic_chaos.platforms.aws.clients import AwsClients
from elastic_chaos.platforms.aws.guard import Call, Guard, Undo


@dataclass(frozen=True)
class Replayed:
    undo: Undo
    result: str
    """ok, already gone, dry-run, or the error (the entry then stays open)."""
    closed: bool


def describe(undo: Undo) -> str:
    return f"{undo.kind} {undo.target} (run {undo.run})"


def replay(guard: Guard, *, aws: AwsClients | None = None, core_v1: Any = None) -> list[Replayed]:
    """Undo every open journal entry (none in a dry run: they are only listed)."""
    if guard.journal is None:
        return []
    out = []
    for undo in guard.journal.pending():
        try:
            result = _undo(guard, undo, aws, core_v1)
        except ChaosError as exc:
            out.append(Replayed(undo, f"failed: {exc}", closed=False))
            continue
        if not guard.dry_run:
            guard.journal.close(undo, result)
        out.append(Replayed(undo, result, closed=not guard.dry_run))
    return out


def _undo(guard: Guard, undo: Undo, aws: AwsClients | None, core_v1: Any) -> str:
    if undo.kind in ("delete-fis-template", "stop-fis-experiment"):
        if aws is None or aws.fis is None:
            raise SetupError(f"{describe(undo)} needs AWS access: pass --region (and credentials)")
        actions = AwsActions(aws, guard, run_id=undo.run)
        fn: Callable[[str], None] = (actions.delete_template if undo.kind == "delete-fis-template"
                                     else actions.stop_experiment)
        fn(undo.target)
        return "dry-run" if guard.dry_run else "ok"
    if undo.kind == "uncordon":
        if core_v1 is None:
            raise SetupError(f"{describe(undo)} needs Kubernetes access: pass --kubeconfig/--kube-context")
        from elastic_chaos.platforms.kubernetes.actions import ClusterActions
        from elastic_chaos.platforms.kubernetes.watch import api_status
        actions_k8s = ClusterActions(core_v1, "default")

        def uncordon() -> str:
            try:
                actions_k8s.set_unschedulable(undo.target, False)
            except ChaosError as exc:
                if api_status(exc.__cause__ or exc) == 404:
                    return "already gone"
                raise
            return "ok"
        result = guard.mutate(Call("kubernetes", "PatchNode", undo.target, {"spec": {"unschedulable": False}}),
                              uncordon, cleanup=True)
        return result or "dry-run"
    raise SetupError(f"unknown rollback kind {undo.kind!r} in the journal ({describe(undo)}); "
                     "was it written by a newer elastic-chaos?")
