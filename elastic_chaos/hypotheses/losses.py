"""Hypotheses where something is lost: a node, a second node, a worker, the node writing a
checkpoint, the store host, the restart budget."""
from __future__ import annotations

from dataclasses import dataclass

from elastic_chaos.events import AgentEv, CheckpointEv, RdzvEv, last, of
from elastic_chaos.events.records import FaultRecord
from elastic_chaos.faults.triggers import checkpoint_started, during_rendezvous, round_closed
from elastic_chaos.hypotheses.api import Trial, hypothesis, seconds
from elastic_chaos.hypotheses.final import FinalStateOptions, check_final_state, prepare
from elastic_chaos.options import DAY_S, MAX_STEPS, option, validate
from elastic_chaos.waiting import eventually


@dataclass(frozen=True)
class AfterRecovery(FinalStateOptions):
    extra_steps: int = option(0, "steps to train after the recovery before the verdict (the exactly-once "
                                 "account then covers the resized world too)", minimum=0, maximum=MAX_STEPS)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("kill-node", "hard node loss: every process of one node killed at once (SIGKILL)",
            fault="kill-node", params=AfterRecovery)
def kill_node(t: Trial) -> None:
    """Hard-kill one node of a steady job. Training resumes, loses at most one
    checkpoint interval, keeps at least its minimum world; the survivors notice and
    re-form; a replacement brings the world back to full size when the node pool
    replaces nodes, and nothing is provisioned when it does not. With ``--compare-final`` the job
    trains to a final step, and its final checkpoint must equal a clean run's: at a fixed size where
    the node is replaced, else a clean replay of the world sizes it trained at
    (elastic_chaos.hypotheses.final)."""
    t.start(prepare(t, t.params))
    t.steady()
    record = t.inject()
    rec = t.recover(record)
    if t.replaces_nodes:
        rec = t.regrow(record)
    if t.params.extra_steps:
        t.run.wait_for_steps(t.params.extra_steps, timeout=t.opts.timeout_s)
    v = t.verdict
    t.check_recovered(rec)
    v.require(rec.world_size_before == t.job.initial_nodes * t.job.nproc_per_node,
              f"world size before the fault {rec.world_size_before}", check="steady-world")
    v.require((rec.world_size_after or 0) >= t.min_world,
              f"world size after recovery {rec.world_size_after} >= min {t.min_world}", check="world-size")
    v.require(rec.detect_s is not None and rec.rendezvous_s is not None,
              f"the survivors noticed ({seconds(rec.detect_s)}) and re-formed ({seconds(rec.rendezvous_s)})",
              check="detected")
    pool = t.run.platform.node_pool()
    if t.replaces_nodes and pool is not None:
        delay = pool.provisioning_delay_s or 0.0
        v.require(rec.world_size_final == t.full_world and rec.replacement_s is not None
                  and rec.replacement_s >= delay,
                  f"a replacement joined {seconds(rec.replacement_s)} after the loss (provisioning "
                  f"{delay:g}s): world size back to {rec.world_size_final} of {t.full_world}", check="replacement")
    else:
        shrunk = (rec.world_size_before or 0) - t.job.nproc_per_node
        v.require(rec.world_size_after == shrunk and rec.replacement_s is None,
                  f"no replacement: the world shrank to {rec.world_size_after} (expected {shrunk})",
                  check="shrank")
    check_final_state(t, t.params)


@hypothesis("cascading-loss", "a second node is lost while the survivors re-form after a first loss",
            fault="kill-node", defaults={"nodes": "1:3", "replace_lost_nodes": False})
def cascading_loss(t: Trial) -> None:
    """Kill one node, and a second one the moment a survivor starts re-forming the
    rendezvous. The job still ends up training with what is left, losing at most one
    checkpoint interval; the cascade is measured as part of the first recovery."""
    t.start()
    t.steady()
    second = t.run.arm(t.fault(node=None), during_rendezvous())
    first_record = t.inject()
    cascade = second.wait(timeout=t.opts.timeout_s)
    rec = t.recover(first_record)
    t.check_recovered(rec)
    left = t.full_world - 2 * t.job.nproc_per_node
    t.verdict.require(cascade.injected_at > first_record.injected_at,
                      f"the second loss ({cascade.target}) hit {cascade.injected_at - first_record.injected_at:.1f}s "
                      f"after the first ({first_record.target}), while re-forming", check="cascade")
    t.verdict.require(rec.world_size_after == max(left, t.min_world),
                      f"the job trains on with what is left: world size {rec.world_size_before} -> "
                      f"{rec.world_size_after}", check="world-size")


@dataclass(frozen=True)
class AfterRound:
    within_s: float = option(60.0, "how long the node left has, after the second loss, to train past the "
                                   "step of the first (torch 2.13 waits 300 s for the lost node first)",
                             minimum=1, units="s", maximum=DAY_S)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("loss-after-round", "a node is lost the moment a rendezvous round closes, before its agents "
                                "have exchanged their ranks", fault="kill-node",
            defaults={"nodes": "1:3", "replace_lost_nodes": False}, params=AfterRound)
def loss_after_round(t: Trial) -> None:
    """Kill one node; the moment the survivors' new round closes, kill one of its participants,
    before the agents have read the master address and their ranks from the round's store. The
    hypothesis: the node left trains on within ``within_s``. torch 2.13's agents wait for the lost
    participant in that exchange for the store's 300 s timeout and then exit
    (elastic_chaos.analysis.barrier), so it does not hold; the reason names the stuck node."""
    t.start()
    t.steady()
    second = t.run.arm(t.fault(node=None), round_closed())
    first_record = t.inject()
    cascade = second.wait(timeout=t.opts.timeout_s)
    closed = last(t.run.timeline.events(), RdzvEv.ROUND_COMPLETE, until=cascade.injected_at)
    if closed is None:
        t.verdict.fail("no round closed before the second loss", check="window")
    else:
        done = sorted({str(e.node) for e in t.run.timeline.select(AgentEv.RENDEZVOUS_COMPLETE, after=closed.t,
                                                                   until=cascade.injected_at)})
        t.verdict.require(not done, f"the second loss ({cascade.target}) hit {cascade.injected_at - closed.t:.2f}s "
                                    f"after round {closed.data.round} closed, when the agents that had "
                                    f"finished it were: {', '.join(done) or 'none'}", check="window")
    rec = t.run.wait_for_recovery(first_record, timeout=t.params.within_s)
    t.check_recovered(rec)


@hypothesis("worker-crash", "one worker process of one node dies (SIGKILL); the node stays", fault="worker-crash",
            params=FinalStateOptions)
def worker_crash(t: Trial) -> None:
    """One worker dies; its node restarts the worker group at the same size, spending
    one restart of its budget (``--compare-final``: and ends as a clean run would)."""
    t.start(prepare(t, t.params, loses_a_node=False))
    t.steady()
    rec = t.recover(t.inject())
    t.check_recovered(rec)
    t.verdict.require(rec.world_size_after == rec.world_size_before,
                      f"world size kept: {rec.world_size_before} -> {rec.world_size_after}", check="world-size")
    t.verdict.require(rec.restarts_used == 1 and rec.restart_budget == t.job.max_restarts,
                      f"one restart spent of the budget (used {rec.restarts_used} of {rec.restart_budget})",
                      check="restarts")
    check_final_state(t, t.params)


@dataclass(frozen=True)
class Repetitions(FinalStateOptions):
    repetitions: int = option(1, "how many kills, each during a checkpoint write", minimum=1, maximum=1000)
    save_delay_s: float = option(1.0, "the reference trainer's pause between its durable temporary file and "
                                      "the rename (a large model's write: the window the kill aims at)",
                                 flag="--save-delay", minimum=0, units="s", maximum=3600)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("kill-during-checkpoint", "hard kill of the node writing a checkpoint, while it writes; the "
                                      "restart must load the newest complete one",
            fault="kill-during-checkpoint", params=Repetitions)
def kill_during_checkpoint(t: Trial) -> None:
    """A kill lands while a checkpoint is being written: the restart loads the newest
    COMPLETE checkpoint (never the partial one), and no restart meets a corrupt file."""
    # each kill waits for the next save past the steady step and a recovery: two intervals a kill
    job = prepare(t, t.params, fault_steps=2 * t.params.repetitions * t.job.checkpoint_every)
    if job.script and job.observe.progress_regex:
        from elastic_chaos.errors import SpecError
        raise SpecError("kill-during-checkpoint fires when a checkpoint write starts, which only "
                        "elastic_chaos.trainer.progress reports (report_checkpoint_started); a script read by "
                        "--progress-regex shows completed saves only. Integrate it (docs/INTEGRATE.md)")
    if not job.script:
        from dataclasses import replace
        job = replace(job, trainer_args=(*job.trainer_args, "--save-delay", f"{t.params.save_delay_s:g}"))
    t.start(job)
    t.steady()
    for i in range(t.params.repetitions):
        armed = t.run.arm(t.fault(), checkpoint_started(min_step=t.steady_steps))
        record = armed.wait(timeout=t.opts.timeout_s)
        rec = t.recover(record)
        step = record.detail.get("checkpoint_step")
        complete = [e.data.step for e in of(t.run.timeline.events(), CheckpointEv.SAVED, until=record.injected_at)
                    if step is not None and e.data.step is not None and e.data.step < int(step)]
        newest = max(complete, default=0)
        t.verdict.require(record.detail.get("during_write") is True,
                          f"#{i + 1}: the kill landed while checkpoint {step} was being written", check="aim")
        t.verdict.require(rec.resumed_from_step == newest,
                          f"#{i + 1}: resumed from step {rec.resumed_from_step}, the newest complete checkpoint "
                          f"({newest}), not the interrupted {step}", check="newest-complete")
        t.check_recovered(rec)
        if t.replaces_nodes and i + 1 < t.params.repetitions:
            t.regrow(record)
    corrupt = t.run.timeline.select(CheckpointEv.CORRUPT)
    t.verdict.require(not corrupt, f"no restart met a corrupt checkpoint ({len(corrupt)} reported)",
                      check="no-corrupt")
    check_final_state(t, t.params)


@hypothesis("store-host-loss", "c10d backend: kill the node hosting the rendezvous TCPStore",
            fault="store-host-loss", forced={"rdzv_backend": "c10d", "replace_lost_nodes": False})
def store_host_loss(t: Trial) -> None:
    """Kill the node hosting the c10d store. Hypothesis: the job survives it. On c10d
    it does not (the store is a single point of failure): the verdict says the job
    failed permanently and why."""
    t.start()
    t.steady()
    record = t.inject()
    survived = _survives(t, record)
    t.verdict.require(survived, f"the job survives the loss of its c10d store host ({record.target})"
                      + ("" if survived else ": it did not, it failed permanently: "
                         + "; ".join(t.run.wait_for_job_end(timeout=10).reasons)), check="job-survives")


@dataclass(frozen=True)
class Crashes:
    crashes: int | None = option(None, "worker crashes to survive (default: max-restarts + 1, one too many)",
                                 minimum=1, maximum=1000)

    def __post_init__(self) -> None:
        validate(self)


@hypothesis("restarts-exhausted", "more worker crashes than --max-restarts allows; the job fails permanently "
                                  "and the verdict says why", fault="worker-crash", params=Crashes)
def restarts_exhausted(t: Trial) -> None:
    """Crash a worker of one node ``crashes`` times. Hypothesis: the job survives. With
    more crashes than max_restarts it cannot: the verdict says the budget ran out."""
    crashes = t.params.crashes if t.params.crashes is not None else t.job.max_restarts + 1
    t.start()
    t.steady()
    target = t.opts.target or t.run.platform.alive_nodes()[-1].name
    record = None
    for i in range(crashes):
        record = t.inject(t.fault(node=target))
        if i + 1 < crashes:
            t.recover(record)
    assert record is not None
    survived = _survives(t, record)
    t.verdict.require(survived, f"the job survives {crashes} worker crashes with max_restarts="
                                f"{t.job.max_restarts}" + ("" if survived else ": it did not, it failed permanently: "
                                + "; ".join(t.run.wait_for_job_end(timeout=10).reasons)), check="job-survives")


def _survives(t: Trial, record: FaultRecord) -> bool:
    """Whether training regains its pre-fault progress before the job dies for good
    (or the timeout passes)."""
    def settled() -> str | None:
        if t.run.recovery(record).regain_s is not None:
            return "regained"
        return "gone" if t.run.job_gone() else None
    return eventually(settled, timeout_s=t.opts.timeout_s, interval_s=1.0) == "regained"
