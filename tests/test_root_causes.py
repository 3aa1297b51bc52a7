"""A job that dies of a full disk, a permission or a missing file says so (issue 15,
finding 8): the root cause is in the outcome, the verdict and the report, not only
in a node log."""
from __future__ import annotations

import subprocess

import pytest

from elastic_chaos.analysis.outcome import FailureCause, RootCause, job_outcome
from elastic_chaos.events import Event, NodeEv, ProgressEv
from elastic_chaos.watchers.logs import parse_raw, root_cause

TRACE = ["[rank0]: Traceback (most recent call last):",
         "[rank0]:   File \"/x/trainer/checkpoint.py\", line 60, in save",
         "[rank0]: OSError: [Errno 28] No space left on device"]


def events_of(lines: list[str], node: str = "node-0") -> list[Event]:
    return [e for e in (parse_raw(line, node, 10.0 + i) for i, line in enumerate(lines)) if e is not None]


@pytest.mark.parametrize("error,message,root", [
    ("OSError", "[Errno 28] No space left on device", "disk_full"),
    ("RuntimeError", "[enforce fail at inline_container.cc:603] . unexpected pos ... file write failed", "disk_full"),
    ("PermissionError", "[Errno 13] Permission denied: '/ckpt/x.pt'", "permission_denied"),
    ("FileNotFoundError", "[Errno 2] No such file or directory: 'nvidia-smi'", "missing_file"),
    ("ModuleNotFoundError", "No module named 'apex'", "missing_module"),
    ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
    ("RuntimeError", "Connection closed by peer", None),
])
def test_a_worker_error_names_its_root_cause(error, message, root):
    assert root_cause(error, message) == root


def test_a_scripts_own_traceback_line_is_read_without_a_rank_prefix():
    (event,) = events_of(["OSError: [Errno 28] No space left on device: 'snapshot.pt'"])
    assert event.type == ProgressEv.WORKER_ERROR and event.data.root == "disk_full"


def test_a_job_that_runs_out_of_disk_says_so_not_only_that_its_budget_ran_out():
    events = [Event.make(NodeEv.STARTED, 1.0, "node-0"), *events_of(TRACE),
              Event.make(NodeEv.EXITED, 20.0, "node-0", {"exit_code": 1})]
    outcome = job_outcome(events)
    assert outcome.failed and outcome.causes == {FailureCause.EXITED}
    assert outcome.root_causes == {RootCause.DISK_FULL}
    assert "No space left on device" in outcome.reasons[0] and "the disk is full (ENOSPC)" in outcome.reasons[0]


@pytest.mark.slow
@pytest.mark.needs_root
def test_a_real_job_whose_checkpoint_disk_is_full_fails_naming_enospc(start_job, tmp_path):
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(tiny)], check=True)
    try:
        run = start_job(nodes="1:1", checkpoint_every=5, max_restarts=1, rdzv_backend="c10d",
                        trainer_args=["--checkpoint-dir", str(tiny)])
        outcome = run.wait_for_job_end(timeout=120)
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=False)
    assert outcome.failed and RootCause.DISK_FULL in outcome.root_causes, outcome.reasons
    assert any("ENOSPC" in r for r in outcome.reasons)

