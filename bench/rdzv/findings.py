"""The rendezvous sweep's findings in prose, each computed from the figures (nothing hard-coded).

Written into results.json's section on every write (bench/results_file.py), so a newer bench explains older
figures too; RESULTS.md lists them. Each names torch's mechanism behind what was measured, and says when this
machine, not torch, set the pace.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from bench.rdzv.episodes import EPISODE_REAL_S, timeout_s
from bench.rdzv.records import Episode, SizeResult
from bench.rdzv.section import RdzvSection
from bench.rdzv.validate import TOLERANCE_S, Recorded, ValidationRow, real_limited
from elastic_chaos.scale.figures import EPISODE_METRICS, BackendFigures, Figures


def findings(section: RdzvSection, figs: Figures) -> list[str]:
    """Plain-language findings from the section's sizes and their figures."""
    out = []
    for backend, b in sorted(figs.backends.items()):
        sizes = section.sizes.get(backend) or ()
        broken = broken_episode(sizes)
        shown = [m for m in EPISODE_METRICS]
        total = sum(1 for p in b.points for m in shown if p.get(m) is not None)
        limited = sum(1 for p in b.points for m in shown if p.get(m) is not None and m in p.limited)
        stopped = next((s for s in sizes if s.not_run), None)
        if stopped:
            out.append(f"{backend} stopped before {stopped.nodes} nodes, which were {stopped.not_run}")
        # a size that broke is not "measured": say the last one every episode run there completed at
        ran = max((p.nodes for p in b.points if b.broke_at is None or p.nodes < b.broke_at), default=0)
        out.append(f"{backend}: " + (f"measured up to {ran} nodes" if ran else "no size completed")
                   + f"; this machine limited {limited} of {total} "
                   "episode figures (`*`)" + (f"; broke at {b.broke_at} nodes: {b.broke_why}" if b.broke_at else "")
                   + _timeout(sizes)
                   + _why_broke(b.broke_why or "", seen_dead=bool(broken and broken.declared_dead))
                   + _machine_share(broken))
        out += _growth(backend, b)
        out += _storm(backend, b)
        out += _store_bound(backend, sizes)
        form = b.fits.get("formation_s")
        if form is not None:
            out.append(f"{backend} formation: {form.formula()} (rms {form.rms:.2g} s)")
    out += _validation_finding(section.validation, section.cores or 1)
    out += [f"the real {r.nodes}-node job never trained at full size on this machine ({r.error}): "
            "no check at that size" for r in section.unfinished_real]
    return out


def recorded_finding(rows: Sequence[Recorded]) -> list[str]:
    if not rows:
        return []
    ok = [r for r in rows if abs(r.diff) <= TOLERANCE_S]
    return [f"re-formation after a hard kill: the harness is within {TOLERANCE_S} s of the scale bench's last real "
            f"jobs on {len(ok)} of {len(rows)} sizes ({', '.join(_diff(r) for r in rows)})"]


def _diff(row: Recorded) -> str:
    return f"{row.nodes} nodes: {row.diff:+.2f} s"


POLL_S = 1.0
"""How often a node waiting in torch's dynamic rendezvous reads the state again (``_delay(seconds=1)`` on SYNC)."""


def phase_sd_s(keep_alive_s: float) -> float:
    """The spread (standard deviation) one re-formation draws from torch's two timers: the 0-``POLL_S`` wait
    for the survivors' next read of the state, and the dead node's last heartbeat, 0-1 keep-alive intervals
    older than the kill on top of the expiry. Both uniform and independent: variance (a^2 + b^2) / 12."""
    return math.sqrt((POLL_S ** 2 + keep_alive_s ** 2) / 12)


def lead_finding(validation: Sequence[ValidationRow], rows: Sequence[Recorded], *, keep_alive_s: float,
                 harness_kills: int) -> list[str]:
    """Whether the harness re-forms faster than real torchrun beyond the timers' noise (issue 40 asked why it
    led by 0.5-1 s): the recorded real jobs' differences against the spread the two timers predict for one
    real kill beside a median of ``harness_kills`` in the harness; and, in the replays, the difference beside
    the real job's load (its agents share the CPU with its workers; the harness runs none)."""
    if not rows:
        return []
    diffs = [r.diff for r in rows]
    mean = sum(diffs) / len(diffs)
    spread = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)) if len(diffs) > 1 else None
    one = phase_sd_s(keep_alive_s)
    # the median of n uniform draws has a variance of about pi/2 * var/n
    expected = one * math.sqrt(1 + math.pi / (2 * harness_kills))
    faster = sum(1 for d in diffs if d < 0)
    out = [f"re-formation, harness minus real torchrun over the {len(diffs)} recorded real jobs: mean {mean:+.2f} s "
           f"(standard error {expected / math.sqrt(len(diffs)):.2f} s), {faster} of {len(diffs)} faster"
           + (f", spread {spread:.2f} s" if spread is not None else "")
           + f", where torch's two timers alone (a 0-{POLL_S:g} s rendezvous poll, a heartbeat 0-{keep_alive_s:g} s "
           f"older than the kill) give one real kill beside a median of {harness_kills} a spread of {expected:.2f} s "
           "(less where the real side is a median too): "
           + ("no lead beyond that noise" if abs(mean) <= 2 * expected / math.sqrt(len(diffs))
              else "a difference beyond that noise")]
    replays = sorted((r for r in validation if not r.failed and r.reformation_s.diff is not None
                      and r.load_avg_real is not None), key=lambda r: r.load_avg_real or 0.0)
    if len(replays) > 1:
        pairs = ", ".join(f"load {r.load_avg_real:g}: {r.reformation_s.diff:+.2f} s" for r in replays)
        grows = all(b.reformation_s.diff <= a.reformation_s.diff  # type: ignore[operator]
                    for a, b in zip(replays, replays[1:], strict=False))
        out.append(f"in the replays of real jobs, the harness' re-formation against the real job's load average "
                   f"({pairs}): " + ("the harness' lead grows with the load: consistent with the real agents' "
                                     "heartbeats and rendezvous polls waiting for a CPU behind their workers, which "
                                     "the harness does not run"
                                     if grows else "no order with the load"))
    return out


def _why_broke(why: str, *, seen_dead: bool) -> str:
    """torch's code behind a failure the harness saw (matched on what the nodes reported); ``seen_dead``: the
    broken episode saw a live node declared dead (Episode.declared_dead)."""
    if "assigned_ranks" in why and not seen_dead:
        return (". Why is not established by this run: the nodes timed out waiting for their rank assignment "
                "(SimpleElasticAgent._assign_worker_ranks), but no participant of a completed round was seen "
                "declared dead")
    if "assigned_ranks" in why:
        return (". torch's cause, seen in this run: a participant whose heartbeat is older than keep_alive_interval x "
                "keep_alive_max_attempt is removed by any node's sync (_BackendRendezvousStateHolder._sanitize), "
                "even after its round completed (_remove_participant_epilogue reopens a round only when nobody is "
                "left): nodes that read the state before and after see different worlds, rank 0's multi_get of "
                "every role_info waits for a node that never writes it, and every node of the round fails after "
                "the store's 60 s timeout (DistStoreError in SimpleElasticAgent._assign_worker_ranks). Heartbeats "
                "came late because this machine could not run the re-formation's compare-and-set storm in real time")
    if "0 round(s) completed" in why:
        storm = (". torch's mechanism: every join is a compare-and-set of the whole state on one key, retried at "
                 "once when lost (_DistributedRendezvousOpExecutor.run), so N nodes joining together make O(N^2) "
                 "attempts, each moving the whole state")
        if seen_dead:
            return storm + ("; while they queued, joined nodes' heartbeats (also compare-and-sets) aged past "
                            "keep_alive_interval x keep_alive_max_attempt and _sanitize removed them again (seen "
                            "in this run), so the round never held min_nodes live participants")
        return storm + "; no live participant was seen declared dead: the storm itself did not end in time"
    return ""


def _timeout(sizes: Sequence[SizeResult]) -> str:
    """The timeout a backend's broken size had, in perceived seconds, when a dilation shortened it."""
    if not sizes or not sizes[-1].broke:
        return ""
    n, d = sizes[-1].nodes, sizes[-1].dilation or 1.0
    real_s = sizes[-1].episode_real_s or EPISODE_REAL_S
    if timeout_s(n, d, real_s) >= timeout_s(n):
        return ""
    return (f" (its timeout: {timeout_s(n, d, real_s):g} perceived seconds, at most {real_s / 60:g} real minutes "
            f"at dilation x{d:g}, where {timeout_s(n):g} s would apply in real time)")


def broken_episode(sizes: Sequence[SizeResult]) -> Episode | None:
    """The episode a backend's sweep broke on (its last size's last episode), None when none broke."""
    if not sizes or not sizes[-1].broke or not sizes[-1].episodes:
        return None
    return sizes[-1].episodes[-1]


QUIET_S = 1.0
"""A broken episode whose machine was saturated no longer than this (two CPU samples) was not held back by it."""


def _machine_share(ep: Episode | None) -> str:
    """How long this machine was saturated during the episode a size broke on."""
    if not ep or not ep.elapsed_s:
        return ""
    saturated = ep.saturated_s or 0.0
    share = saturated / ep.elapsed_s
    if share > 0.5:
        where = ("so this machine, running every node's (de)serialisation on its cores, set that pace: on N machines "
                 "the same storm runs in parallel, and whether torch alone breaks at this size is not decided here")
    elif saturated > QUIET_S:
        # a storm saturates the machine for seconds, heartbeats expire, then the nodes wait out the store's
        # timeouts with the machine idle: a small share of a long episode, but the damage was done in the storm
        where = ("long enough to delay heartbeats past their expiry while the nodes' compare-and-sets queued on it; "
                 "the rest of the episode was spent waiting out timeouts, so whether torch alone breaks at this "
                 "size is not decided here")
    else:
        where = "so torch's own timing, not this machine, is the likelier limit"
    shown = ep.saturated_s if ep.has("saturated_s") else None
    return (f". This machine was saturated for {shown} s of that episode's {ep.elapsed_s} s "
            f"({share:.0%}), {where}")


STORE_BOUND_SHARE = 0.25
"""An episode whose store waited for its one-core quota more than this share of the time was store-bound."""


def _store_bound(backend: str, sizes: Sequence[SizeResult]) -> list[str]:
    """Dilated episodes whose store, held to one core (bench.rdzv.throttle), was the limit: a property of torch's
    rendezvous at that size (every operation goes through one store), not of this machine."""
    out = []
    for size in sizes:
        bound = [e for e in size.episodes if e.elapsed_s and e.store_throttled_s > STORE_BOUND_SHARE * e.elapsed_s]
        if bound:
            worst = max(bound, key=lambda e: e.store_throttled_s / e.elapsed_s)
            out.append(f"{backend} at {size.nodes} nodes: the store, held to one core, was the limit in "
                       f"{len(bound)} episode(s) (worst: {worst.label}, waiting for its core "
                       f"{worst.store_throttled_s / worst.elapsed_s:.0%} of the time): a single-threaded store "
                       "serving every node's whole-state reads and compare-and-sets saturates at this size")
    return out


def _growth(backend: str, b: BackendFigures) -> list[str]:
    pts = [(p.nodes, p.get("store_bytes_per_s"), p.get("store_ops_per_s"), "store_bytes_per_s" in p.limited)
           for p in b.points if p.get("store_bytes_per_s")]
    if len(pts) < 2:
        return []
    (n0, b0, o0, _), (n1, b1, o1, lim) = pts[0], pts[-1]
    assert b0 and b1
    bytes_exp = math.log(b1 / b0) / math.log(n1 / n0)
    ops_exp = math.log(o1 / o0) / math.log(n1 / n0) if o0 and o1 else float("nan")
    caveat = " (the largest size limited by this machine)" if lim else ""
    return [f"{backend} store in steady state: operations grow as N^{ops_exp:.2f} and payload bytes as "
            f"N^{bytes_exp:.2f} ({n0} -> {n1} nodes{caveat}: {b0 / 1e6:.3g} -> {b1 / 1e6:.3g} MB/s). "
            "torch's cause: every "
            "agent's monitor loop calls num_nodes_waiting(), which reads the whole rendezvous state at most once a "
            "second (cache_duration 1 s), and every keep-alive rewrites the whole state (all participants and "
            "their heartbeats) with a compare-and-set on one key: N agents x O(N) bytes each"]


def _storm(backend: str, b: BackendFigures) -> list[str]:
    ops, mb = b.measured("reform_hard_store_ops"), dict(b.measured("reform_hard_store_mb"))
    if len(ops) < 2:
        return []
    (n0, o0), (n1, o1) = ops[0], ops[-1]
    grow = math.log(o1 / o0) / math.log(n1 / n0) if o0 and o1 else float("nan")
    bytes_grow = math.log(mb[n1] / mb[n0]) / math.log(n1 / n0) if mb.get(n0) and mb.get(n1) else float("nan")
    return [f"{backend}: one re-formation after a hard loss costs the store {o0:.0f} operations "
            f"({mb.get(n0, 0):.2g} MB) at {n0} nodes and {o1:.0f} ({mb.get(n1, 0):.4g} MB) at {n1}: operations "
            f"grow as N^{grow:.1f}, bytes as "
            f"N^{bytes_grow:.1f}. torch's cause: every survivor removes and re-adds itself with a compare-and-set of "
            "the whole state (O(N) bytes), retried at once when lost, so when all start together each success costs "
            "up to one attempt per contender: O(N^2) operations, O(N^3) bytes"]


def _validation_finding(rows: Sequence[ValidationRow], cores: int) -> list[str]:
    done = [r for r in rows if not r.failed]
    judged = [r for r in done if not real_limited(r, cores)]
    out = []
    if judged:
        ok = [r for r in judged if r.within]
        worst = max((abs(v.diff) for r in judged for v in (r.formation_s, r.reformation_s)
                     if v.diff is not None), default=None)
        out.append(f"the harness agrees with real torchrun within {TOLERANCE_S} s on {len(ok)} of {len(judged)} sizes "
                   f"({', '.join(str(r.nodes) for r in judged)} nodes); worst difference {worst} s")
    for r in done:
        if real_limited(r, cores):
            out.append(f"the real {r.nodes}-node job measured this machine, not torch (load average "
                       f"{r.load_avg_real} on {cores} cores: formation {r.formation_s.real} s real against "
                       f"{r.formation_s.harness} s in the harness, which runs no workers); not judged")
    return out
