"""A report folder holds one run: a used one, a file, or one that cannot be written is refused
before anything starts (issue 15, findings 1 and 5)."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.runner.folder import prepare
from elastic_chaos.runner.run import ChaosRun


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=180, env={**os.environ, **(env or {})})


def a_finished_run(folder: Path) -> Path:
    """What a run leaves behind (the parts that matter here)."""
    (folder / "nodes").mkdir(parents=True)
    (folder / "nodes" / "node-0.log").write_text('ELASTIC_CHAOS {"ev":"step","t":1,"step":99}\n')
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "ckpt-00000080.pt").write_bytes(b"old")
    (folder / "timeline.jsonl").write_text('{"t":1,"source":"runner","kind":"phase","node":null,"data":{}}\n')
    (folder / "report.json").write_text("{}")
    (folder / "report.html").write_text("<html></html>")
    return folder


@pytest.mark.parametrize("marker", ["report.json", "timeline.jsonl", "nodes", "checkpoints"])
def test_a_folder_holding_a_run_is_refused(tmp_path, marker):
    target = tmp_path / "r"
    target.mkdir()
    (target / marker).mkdir() if marker in ("nodes", "checkpoints") else (target / marker).write_text("{}")
    with pytest.raises(SpecError, match="already holds a run") as err:
        prepare(target)
    assert "--overwrite" in str(err.value) and "new folder" in str(err.value)


def test_a_new_or_empty_folder_is_accepted_and_created(tmp_path):
    assert prepare(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert (tmp_path / "a" / "b").is_dir()
    assert prepare(tmp_path / "a" / "b") == tmp_path / "a" / "b"      # still empty: not used


def test_overwrite_deletes_the_old_run_first(tmp_path):
    target = a_finished_run(tmp_path / "r")
    prepare(target, overwrite=True)
    assert list(target.iterdir()) == []


def test_overwrite_never_deletes_what_a_run_does_not_write(tmp_path):
    target = a_finished_run(tmp_path / "r")
    (target / "my-notes.txt").write_text("mine")
    with pytest.raises(SpecError, match="my-notes.txt"):
        prepare(target, overwrite=True)
    assert (target / "my-notes.txt").exists() and (target / "timeline.jsonl").exists()


def test_overwrite_never_empties_a_folder_that_is_not_a_report_folder(tmp_path):
    training = tmp_path / "my-training"
    (training / "checkpoints").mkdir(parents=True)
    (training / "checkpoints" / "model.pt").write_bytes(b"precious")
    with pytest.raises(SpecError, match="does not look like an elastic-chaos report folder"):
        prepare(training, overwrite=True)
    assert (training / "checkpoints" / "model.pt").read_bytes() == b"precious"


def test_a_file_is_not_a_report_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecError, match="is a file"):
        prepare(tmp_path / "f")


def test_a_folder_under_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecError, match=r"under .*f, which is a file"):
        prepare(tmp_path / "f" / "sub" / "r")


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process cannot write: a read-only mount as root (root ignores modes), a
    read-only mode otherwise."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", f"ro-{uuid.uuid4().hex[:6]}",
                              str(folder)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_an_unwritable_folder_is_refused(unwritable):
    with pytest.raises(SpecError, match="not writable|cannot create"):
        prepare(unwritable)
    with pytest.raises(SpecError, match="cannot create"):
        prepare(unwritable / "sub")


def test_a_chaos_run_refuses_a_used_folder_before_it_starts_anything(tmp_path):
    target = a_finished_run(tmp_path / "r")
    before = (target / "timeline.jsonl").read_text()
    with pytest.raises(SpecError, match="already holds a run"):
        ChaosRun(target)
    assert (target / "timeline.jsonl").read_text() == before          # not even opened for append


# -- the command line: exit 2 and what to do, never a traceback, nothing started -----------
def assert_refused(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in out.stderr


def test_run_into_a_used_report_dir_is_exit_2_and_starts_nothing(tmp_path):
    target = a_finished_run(tmp_path / "r")
    before = sorted(p.name for p in target.rglob("*"))
    out = cli("run", "kill-node", "--quiet", "--report-dir", str(target))
    assert_refused(out, "already holds a run", "--overwrite")
    assert sorted(p.name for p in target.rglob("*")) == before
    assert not (target / "etcd-data").exists()


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_run_with_a_report_dir_that_is_or_lies_under_a_file_is_exit_2(tmp_path, where):
    (tmp_path / "f").write_text("x")
    target = tmp_path / "f" if where == "file" else tmp_path / "f" / "r"
    assert_refused(cli("run", "kill-node", "--quiet", "--report-dir", str(target)), "which is a file"
                   if where == "under-a-file" else "is a file")


def test_run_with_an_unwritable_report_dir_is_exit_2(unwritable):
    out = cli("run", "kill-node", "--quiet", "--report-dir", str(unwritable / "r"))
    assert_refused(out, "--report-dir")
    with contextlib.suppress(FileNotFoundError):
        assert list(unwritable.iterdir()) == []


# -- the probe: two runs into one folder -----------------------------------------------
def events(folder: Path) -> list[dict]:
    import json
    return [json.loads(line) for line in (folder / "timeline.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_second_run_into_the_same_folder_is_refused_and_an_overwrite_starts_clean(tmp_path):
    target, state = tmp_path / "r", {"ELASTIC_CHAOS_STATE": str(tmp_path / "state")}
    # the fast preset: the point is the folder, not how long torch's default rendezvous takes
    first = cli("run", "kill-node", "--quiet", "--steady-steps", "25", "--checkpoint-every", "10",
                "--no-replace", "--rdzv-preset", "fast", "--report-dir", str(target), env=state)
    assert first.returncode in (0, 1), first.stderr[-3000:]
    assert list((target / "checkpoints").glob("ckpt-*.pt"))          # evidence a second run could reuse

    second = cli("run", "kill-node", "--quiet", "--report-dir", str(target), env=state)
    assert_refused(second, "already holds a run", "--overwrite")

    third = cli("run", "kill-node", "--quiet", "--steady-steps", "25", "--checkpoint-every", "10",
                "--no-replace", "--rdzv-preset", "fast", "--overwrite", "--report-dir", str(target), env=state)
    assert third.returncode in (0, 1), third.stderr[-3000:]
    evs = events(target)
    started = [e for e in evs if e["kind"] == "job_started"]
    assert len(started) == 1                                          # one run's timeline
    assert min(e["t"] for e in evs) >= started[0]["t"] - 5            # nothing from before it began
    loaded = [e for e in evs if e["source"] == "checkpoint" and e["kind"] == "loaded"]
    assert loaded and min(e["t"] for e in loaded) == min(e["t"] for e in loaded if e["data"]["step"] == 0)
    injected = next(e for e in evs if e["kind"] == "injected")
    steps = [e for e in evs if e["kind"] == "step" and e["t"] < injected["t"]]
    assert max(e["data"]["step"] for e in steps) >= 25               # the fault came after its own steady state


def test_every_file_the_report_writes_is_one_overwrite_may_delete(tmp_path):
    """A run's rendering (report.html, summary.md, metrics.prom, ...) is the run's own: --overwrite
    must not refuse a folder for a file the toolkit itself wrote (CI once refused metrics.prom)."""
    import shutil

    from elastic_chaos.reporting import render_folder
    folder = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "runs" / "kill-node-shrink", folder)
    render_folder(folder, png=False)
    assert (folder / "metrics.prom").exists()
    prepare(folder, overwrite=True)                       # a SpecError if anything were not the run's
    assert not any(folder.iterdir())


# -- a live run's folder is its own (issue 36) ------------------------------------------------------------------

def test_overwrite_refuses_a_folder_a_live_run_owns_naming_it(tmp_path):
    from elastic_chaos.runner.folder import claim
    live = claim(tmp_path / "ow")
    (live.path / "timeline.jsonl").write_text("{}\n")
    (live.path / "nodes").mkdir()
    try:
        # before: --overwrite deleted the live run's files; both runs failed on mixed evidence
        code = (f"import sys; from pathlib import Path; from elastic_chaos.runner.folder import prepare\n"
                f"prepare(Path({str(live.path)!r}), overwrite=True)")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and "belongs to a live run" in out.stderr and f"PID {os.getpid()}" in out.stderr
        assert (live.path / "timeline.jsonl").exists() and (live.path / "nodes").is_dir()
    finally:
        live.release()
    prepare(live.path, overwrite=True)          # released: an old run like any other, overwritten
    assert not (live.path / "timeline.jsonl").exists()


def test_a_runner_killed_with_sigkill_leaves_no_lock_behind(tmp_path):
    code = ("import os, sys, time; from pathlib import Path; from elastic_chaos.runner.folder import claim\n"
            f"c = claim(Path({str(tmp_path / 'r')!r})); (c.path / 'timeline.jsonl').write_text('')\n"
            "print('held', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        assert "belongs to a live run" in str(pytest.raises(SpecError, prepare, tmp_path / "r", overwrite=True).value)
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    prepare(tmp_path / "r", overwrite=True)     # the kernel dropped the dead runner's lock


def test_a_lock_file_alone_is_an_empty_folder(tmp_path):
    from elastic_chaos.runner.folder import LOCK, claim
    held = claim(tmp_path / "r")
    held.release()
    (tmp_path / "r" / LOCK).write_text("{}")    # a lock file a killed runner left: its lock is free
    prepare(tmp_path / "r")
