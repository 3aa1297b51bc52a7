"""What the options mean for a user's script, and the thread advice the report shows.

--checkpoint-every is the reference trainer's save interval, and for a script the bound
on lost progress (its own save interval, which elastic-chaos cannot set); --steady-steps
counts in the script's unit, so the reference trainer's 50 steps cannot be a script's
default (50 epochs): a script's steady state follows from --checkpoint-every, and a
script that gives neither is told to. The local platform's OMP_NUM_THREADS plan is a
timeline event and a remark of the report."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from elastic_chaos.analysis.result import RunResult, build_result
from elastic_chaos.errors import SpecError
from elastic_chaos.events import RunnerEv, Timeline, of
from elastic_chaos.hypotheses.api import Trial, settings
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.platforms.local.threads import announce, plan_threads
from elastic_chaos.reporting.report import render_table
from elastic_chaos.reporting.views import table
from elastic_chaos.spec import REFERENCE_STEADY_STEPS, JobSpec, default_steady_steps

SCRIPT = {"script": ["train.py"], "progress_regex": r"epoch (?P<step>\d+)", "unit": "epoch"}


def steady_steps(values: dict[str, object]) -> int:
    s = settings(get("kill-node"), values, "local")
    return Trial(get("kill-node"), None, s).steady_steps  # type: ignore[arg-type]  # no run: not started


def test_the_reference_trainer_is_hit_at_step_50_whatever_its_checkpoint_interval():
    assert steady_steps({}) == REFERENCE_STEADY_STEPS == 50
    assert steady_steps({"checkpoint_every": 10}) == 50  # unchanged behaviour
    assert steady_steps({"steady_steps": 7}) == 7


@pytest.mark.parametrize(("every", "steady"), [(2, 5), (1, 3), (10, 25), (20, 50)])
def test_a_script_is_hit_halfway_between_its_second_and_third_save(every, steady):
    # the rule that puts the reference trainer's 50 between its checkpoints at 40 and 60
    assert steady_steps({**SCRIPT, "checkpoint_every": every}) == steady
    assert default_steady_steps(JobSpec(script=("t.py",), checkpoint_every=every)) == steady


def test_a_scripts_own_steady_steps_wins():
    assert steady_steps({**SCRIPT, "steady_steps": 4}) == 4
    assert steady_steps({**SCRIPT, "steady_steps": 4, "checkpoint_every": 100}) == 4


def test_a_script_that_says_neither_is_told_both_flags_in_its_unit():
    with pytest.raises(SpecError) as err:
        settings(get("kill-node"), SCRIPT, "local")
    text = str(err.value)
    assert "--steady-steps N (how many epochs it completes before the fault)" in text
    assert "--checkpoint-every N (its save interval in epochs" in text and "50 of your epochs" in text


def test_a_job_for_the_start_job_fixture_needs_neither():
    assert settings(None, SCRIPT, "local").job.script == ("train.py",)


def test_the_command_line_refuses_it_before_anything_starts(tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", "kill-node", "--report-dir",
                          str(tmp_path / "r"), "--unit", "epoch", "--progress-regex", r"epoch (?P<step>\d+)",
                          "--", "train.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "--steady-steps N" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()


def test_the_help_says_what_each_option_means_for_a_script():
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", "kill-node", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    text = re.sub(r"(\w)- (\w)", r"\1-\2", " ".join(out.stdout.split()))  # argparse wraps at hyphens
    assert "--checkpoint-every N the reference trainer: steps between its checkpoints. A script: its own save " \
           "interval in --unit (elastic-chaos cannot change it), so the most progress a fault may cost" in text
    assert "in the job's unit (--unit: a script's epochs" in text
    assert "a script halfway between its 2nd and 3rd save by --checkpoint-every" in text
    assert "--node-local-workdir give each node a working directory of its own" in text
    assert "(default 50)" not in text.split("--steady-steps", 1)[1].split("--", 1)[0]


# -- threads ------------------------------------------------------------------------

def test_a_plan_with_advice_is_a_timeline_event_and_one_without_is_not():
    tl = Timeline()
    assert not announce(tl, plan_threads(cores=8, nodes=1, nproc_per_node=1, env={}))
    assert announce(tl, plan_threads(cores=2, nodes=2, nproc_per_node=1, env={}))
    [said] = of(tl.events(), RunnerEv.THREADS)
    assert said.data.env == {"OMP_NUM_THREADS": "1"} and said.data.cores == 2 and said.data.workers == 2
    assert said.data.threads == 1 and said.data.oversubscribed is False
    assert said.data.advice is not None and "OMP_NUM_THREADS=1 set on every node" in said.data.advice


def test_the_report_remarks_what_the_nodes_ran_with_and_reads_it_back():
    tl = Timeline()
    announce(tl, plan_threads(cores=2, nodes=2, nproc_per_node=1, env={"OMP_NUM_THREADS": "4"}))
    result = build_result(tl.events(), [], scenario="t", platform="local", job=None, verdict=None,
                          started_at=None, finished_at=None)
    assert result.threads is not None and result.threads.oversubscribed
    remark = f"threads: {result.threads.advice}"
    assert remark in table.setup_remarks(result.placement, result.threads)
    assert "OMP_NUM_THREADS=4 (yours, kept)" in render_table(result)
    assert RunResult.from_json(result.to_json()).threads == result.threads
    nothing = build_result([], [], scenario="t", platform="local", job=None, verdict=None, started_at=None,
                           finished_at=None)
    assert nothing.threads is None and nothing.to_json()["threads"] is None
