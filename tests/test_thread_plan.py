"""Thread oversubscription of local nodes sharing this machine's cores
(elastic_chaos.platforms.local.threads.plan_threads: a pure function of cores, nodes, processes per node
and the environment the nodes would get)."""
from __future__ import annotations

import pytest

from elastic_chaos.platforms.local.threads import VAR, plan_threads, usable_cores
from elastic_chaos.watchers.sources import without_tee


def test_two_single_process_nodes_on_two_cores_get_one_thread_each():
    plan = plan_threads(cores=2, nodes=2, nproc_per_node=1, env={})
    assert plan.env == {VAR: "1"} and plan.threads == 1 and not plan.oversubscribed
    assert plan.advice is not None
    assert "2 worker(s) (2 node(s) x 1) share this machine's 2 core(s): OMP_NUM_THREADS=1" in plan.advice
    assert "torch would run 2 thread(s) in each, 4 on 2 cores" in plan.advice


@pytest.mark.parametrize(("cores", "nodes", "threads"), [
    (16, 2, 8),    # two nodes split the machine
    (16, 3, 5),    # a remainder is left idle, never oversubscribed
    (64, 4, 16),
])
def test_single_process_nodes_split_the_cores_between_them(cores, nodes, threads):
    plan = plan_threads(cores, nodes, 1, {})
    assert plan.env == {VAR: str(threads)} and plan.threads == threads
    assert nodes * threads <= cores and not plan.oversubscribed


def test_more_workers_than_cores_is_said_even_at_one_thread_each():
    plan = plan_threads(cores=2, nodes=3, nproc_per_node=1, env={})
    assert plan.env == {VAR: "1"} and plan.oversubscribed
    assert plan.advice is not None and "still 3 workers on 2 cores" in plan.advice


def test_one_worker_alone_keeps_torchs_default():
    plan = plan_threads(cores=2, nodes=1, nproc_per_node=1, env={})
    assert plan.env == {} and plan.advice is None and plan.threads == 2


def test_several_processes_per_node_that_fit_are_left_to_torchrun():
    plan = plan_threads(cores=16, nodes=2, nproc_per_node=4, env={})
    assert plan.env == {} and plan.advice is None and plan.threads == 1


def test_several_processes_per_node_beyond_the_cores_are_advised_not_changed_below_one():
    plan = plan_threads(cores=2, nodes=2, nproc_per_node=2, env={})
    assert plan.env == {VAR: "1"} and plan.oversubscribed and "still 4 workers on 2 cores" in (plan.advice or "")


def test_the_users_own_setting_is_kept_and_advised_when_it_oversubscribes():
    plan = plan_threads(cores=2, nodes=2, nproc_per_node=1, env={VAR: "4"})
    assert plan.env == {} and plan.threads == 2 and plan.oversubscribed  # torch caps its threads at the cores
    assert plan.advice == ("OMP_NUM_THREADS=4 (yours, kept): 2 worker(s) x 2 thread(s) = 4 on 2 core(s), "
                           "oversubscribed, and training slows down many times over; OMP_NUM_THREADS=1 fits, or leave "
                           "it unset and elastic-chaos sets it")


def test_the_users_own_setting_that_fits_is_kept_silently():
    plan = plan_threads(cores=8, nodes=2, nproc_per_node=1, env={VAR: "2"})
    assert plan.env == {} and plan.advice is None and plan.threads == 2


def test_a_users_setting_that_is_not_a_number_is_kept_and_advised():
    plan = plan_threads(cores=2, nodes=2, nproc_per_node=1, env={VAR: "many"})
    assert plan.env == {} and "OMP_NUM_THREADS='many' (yours, kept) is not a whole number" in (plan.advice or "")


def test_an_empty_setting_counts_as_unset():
    assert plan_threads(cores=2, nodes=2, nproc_per_node=1, env={VAR: " "}).env == {VAR: "1"}


def test_usable_cores_is_this_process_affinity():
    import os
    assert usable_cores() == len(os.sched_getaffinity(0)) >= 1


PRINT_THREADS = """
import os, time
import torch
print("threads", os.environ.get("OMP_NUM_THREADS"), torch.get_num_threads(), flush=True)
time.sleep(300)
"""


@pytest.mark.slow
@pytest.mark.parametrize("own", [None, "3"])
def test_local_nodes_get_the_planned_threads_and_a_users_own_setting_is_kept(tmp_path, own):
    import os
    import time

    from elastic_chaos.events import Timeline
    from elastic_chaos.platforms.local.platform import LocalOptions, LocalPlatform
    from elastic_chaos.spec import JobSpec
    script = tmp_path / "threads.py"
    script.write_text(PRINT_THREADS)
    env = ((VAR, own),) if own else ()
    job = JobSpec(nodes="2:2", script=(str(script),), env=env)
    expected = own or plan_threads(usable_cores(), 2, 1, {}).env[VAR]
    if VAR in os.environ and own is None:
        pytest.skip(f"{VAR} is set in this test's own environment: the nodes keep it")
    timeline = Timeline(tmp_path / "timeline.jsonl")
    platform = LocalPlatform(timeline, tmp_path, LocalOptions())
    try:
        platform.start(job)
        logs = [tmp_path / "nodes" / f"node-{i}.log" for i in range(2)]
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not all("threads " in p.read_text() for p in logs if p.exists()):
            time.sleep(0.2)
        lines = [line for p in logs for line in map(without_tee, p.read_text().splitlines())   # the workers' copies
                 if line.startswith("threads ")]
        torch_threads = min(int(expected), usable_cores())  # torch runs no more threads than cores
        assert lines == [f"threads {expected} {torch_threads}"] * 2, lines
    finally:
        platform.stop()
        timeline.close()
