"""Bring your own script, end to end: `elastic-chaos run HYPOTHESIS ... -- script.py` on real
elastic jobs (real etcd, real torchrun agents). The script under test is
tests/scripts/plain_ddp.py: plain DDP, its own log format and snapshot file, no
import of ours. Rendezvous timing is not what these test: last_call_timeout 3 s."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from elastic_chaos.events import CheckpointEv, FaultEv, of, read_timeline

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
PLAIN_DDP = HERE / "scripts" / "plain_ddp.py"
EXAMPLES = HERE.parent / "examples"
PROGRESS = r"\[plain-ddp\] iter=(?P<step>\d+)"
RESUME = r"restored snapshot of iter (?P<step>\d+)"
FAST = ("--last-call-timeout", "3", "--timeout", "150", "--quiet")


def run_cli(tmp_path: Path, *args: str, timeout: float = 400) -> tuple[subprocess.CompletedProcess[str], Path]:
    report = tmp_path / "report"
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", *args[:1], "--report-dir", str(report),
                          *args[1:]], capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    return out, report


def load(report: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((report / "report.json").read_text())
    return data


def node_lines(report: Path, pattern: str) -> list[re.Match[str]]:
    found = []
    for log in sorted((report / "nodes").glob("*.log")):
        found += [m for m in map(re.compile(pattern).search, log.read_text().splitlines()) if m]
    return found


def test_a_plain_ddp_script_survives_kill_node_and_the_report_counts_its_iterations(tmp_path):
    out, report = run_cli(tmp_path, "kill-node", "--no-replace", *FAST, "--steady-steps", "25",
                          "--checkpoint-every", "10", "--unit", "iteration", "--progress-regex", PROGRESS,
                          "--resume-regex", RESUME, "--checkpoint", "snapshot.pt",
                          "--", str(PLAIN_DDP), "--save-every", "10")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "lost iterations" in out.stdout  # the table speaks the script's unit
    data = load(report)
    m = data["faults"][0]["metrics"]
    # the script's own word: the iteration it printed when it restored its snapshot
    restored = [int(x["step"]) for x in node_lines(report, RESUME)]
    assert restored and m["resumed_from_step"] == restored[0] and restored[0] % 10 == 0
    assert m["lost_steps"] == m["pre_step"] - restored[0] and 0 <= m["lost_steps"] <= 10
    assert m["world_size_before"] == 2 and m["world_size_after"] == 1
    assert m["detect_s"] is not None and m["rendezvous_s"] is not None and m["regain_s"] is not None
    assert not any("inferred" in why for why in m["missing"])
    obs = data["observation"]
    assert obs["progress"] == "progress_regex" and obs["resume"] == "resume_regex" and obs["unit"] == "iteration"
    assert obs["checkpoint"]["saves_observed"] >= 2 and not obs["checkpoint"]["never_written"]
    assert Path(obs["workdir"]) == (report / "workdir").resolve() and (report / "workdir" / "snapshot.pt").is_file()
    # every save the file watcher saw is in the timeline as written, and the report says nothing is unreadable
    read = read_timeline(report / "timeline.jsonl")
    assert read.errors == [], read.note()
    assert len(of(read.events, CheckpointEv.SAVED)) == obs["checkpoint"]["saves_observed"]
    assert "could not be read" not in (report / "summary.md").read_text()
    assert "could not be read" not in (report / "report.html").read_text()


def test_a_plain_ddp_script_that_saves_on_sigterm_loses_nothing_to_a_spot_interruption(tmp_path):
    out, report = run_cli(tmp_path, "spot-interruption", "--no-replace", *FAST, "--steady-steps", "25",
                          "--notice", "3", "--rebalance-lead", "1", "--grace", "20", "--unit", "iteration",
                          "--progress-regex", PROGRESS, "--checkpoint", "snapshot.pt",
                          "--", str(PLAIN_DDP), "--save-every", "50")
    assert out.returncode == 0, out.stdout + out.stderr
    m = load(report)["faults"][0]["metrics"]
    saved_on_signal = node_lines(report, r"saved iter (?P<step>\d+) on signal 15")
    assert saved_on_signal and m["pre_step"] == int(saved_on_signal[0]["step"])
    assert m["lost_steps"] == 0 and m["resumed_from_step"] == m["pre_step"]
    assert any("inferred" in why for why in m["missing"])  # no --resume-regex: and the report says so
    assert re.search(r"a checkpoint was saved between the first warning and node-\d+'s end \(.*\): [1-9]\d* "
                     r"save\(s\) in that window", out.stdout)
    assert "not checked: whether the script on node-1 saw the notice" in out.stdout


CRASHES_AT_START = """
import sys
print("loading shards from /data/train", flush=True)
raise FileNotFoundError("/data/train/shard-00000.tar: no such file")
"""


def test_a_script_that_crashes_at_start_never_reaches_steady_state_and_shows_the_node_log(tmp_path):
    script = tmp_path / "broken_train.py"
    script.write_text(CRASHES_AT_START)
    out, _ = run_cli(tmp_path, "kill-node", "--nodes", "1:1", "--max-restarts", "0", *FAST, "--steady-steps", "5",
                     "--progress-regex", PROGRESS, "--", "broken_train.py")
    assert out.returncode == 3, out.stdout + out.stderr  # not steady: no experiment
    assert "the job never reached steady state" in out.stdout
    assert "FileNotFoundError: /data/train/shard-00000.tar: no such file" in out.stdout  # the node's log tail
    assert "Traceback" not in out.stderr


PURE_PYTHON = """
import json, os, sys, time
state = "state/step.json"                     # where it really saves
os.makedirs("state", exist_ok=True)
step = json.load(open(state))["step"] if os.path.exists(state) else 0
if step:
    print(f"resumed at step {step}", flush=True)
while True:
    step += 1
    print(f"step {step}", flush=True)
    if step % 5 == 0:
        with open(state + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(state + ".tmp", state)
    time.sleep(0.1)
"""


def test_a_checkpoint_path_never_written_is_not_steady_and_says_what_is_there(tmp_path):
    script = tmp_path / "count.py"
    script.write_text(PURE_PYTHON)
    # steady state past two save intervals (--checkpoint-every's default 20): the fault once landed seconds
    # after step 12 and so past step 40; now it lands at once, so the test asks for 45 itself
    out, report = run_cli(tmp_path, "worker-crash", "--nodes", "1:1", *FAST, "--steady-steps", "45",
                          "--progress-regex", r"^step (?P<step>\d+)", "--checkpoint", "step.json",
                          "--", str(script))
    # nothing appeared at the watched path two save intervals in: the job is not steady (exit 3), no
    # fault, and the reason names the path and what its folder holds instead
    assert out.returncode == 3, out.stdout + out.stderr
    assert "nothing was written at the --checkpoint path 'step.json'" in out.stdout
    assert "its folder holds: state/" in out.stdout
    assert load(report)["faults"] == []


def test_the_two_line_integration_reports_the_exact_resumed_epoch(tmp_path):
    out, report = run_cli(tmp_path, "worker-crash", "--nodes", "1:1", *FAST, "--steady-steps", "5",
                          "--checkpoint-every", "2", "--unit", "epoch",
                          "--", str(EXAMPLES / "ddp_train_progress.py"), "--save-every", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    data = load(report)
    m = data["faults"][0]["metrics"]
    resumed = node_lines(report, r"Resuming training from snapshot at Epoch (?P<step>\d+)")
    assert resumed and m["resumed_from_step"] == int(resumed[0]["step"])  # the script's word, not inferred
    assert not any("inferred" in why for why in m["missing"]) and m["lost_steps"] <= 2
    assert data["observation"]["progress"] == "elastic_chaos.trainer.progress"
    assert data["observation"]["resume"] == "elastic_chaos.trainer.progress"


def test_the_elastic_job_fixture_runs_a_script_in_its_shared_workdir_and_watches_a_directory(start_job, tmp_path):
    from elastic_chaos.faults import WorkerCrash

    script = tmp_path / "count.py"
    script.write_text(PURE_PYTHON)
    workdir = tmp_path / "shared"
    job = start_job(nodes="1:1", script=[str(script)], workdir=workdir, checkpoint="state",
                      progress_regex=r"^step (?P<step>\d+)", resume_regex=r"resumed at step (?P<step>\d+)",
                      last_call_timeout=3)
    job.wait_for_step(12, timeout=120)
    recovery = job.wait_for_recovery(job.inject(WorkerCrash()), timeout=120)

    assert (workdir / "state" / "step.json").is_file()           # the script ran in the given workdir
    assert recovery.resumed_from_step is not None and recovery.resumed_from_step % 5 == 0
    assert recovery.lost_steps is not None and recovery.lost_steps < 5
    observed = job.observation()
    assert observed is not None and observed.checkpoint is not None
    assert observed.checkpoint.saves_observed >= 2 and observed.resume == "resume_regex"
    assert job.workdir == workdir.resolve()


def test_a_script_that_crashes_in_warm_up_is_not_steady_and_gets_no_fault(tmp_path):
    out, report = run_cli(tmp_path, "kill-node", "--no-replace", *FAST, "--steady-steps", "25",
                          "--checkpoint-every", "10", "--unit", "iteration", "--progress-regex", PROGRESS,
                          "--checkpoint", "snapshot.pt", "--", str(PLAIN_DDP), "--save-every", "10",
                          "--crash-once-at", "5")
    assert out.returncode == 3, out.stdout + out.stderr                   # not steady: no experiment
    data = load(report)
    assert data["verdict"]["outcome"] == "not_steady" and data["faults"] == []
    (check,) = [c for c in data["verdict"]["checks"] if c["name"] == "steady-state"]
    assert "not steady before the fault, so no fault was injected" in check["reason"]
    assert "restart(s) of its budget spent in warm-up" in check["reason"]
    assert "crashed at iter 5 (a warm-up bug)" in check["reason"]        # the script's own line
    read = read_timeline(report / "timeline.jsonl")
    assert not of(read.events, FaultEv.INJECTED) and "NOT STEADY" in out.stdout
