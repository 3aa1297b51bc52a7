"""stale-read: the storage rule on a real FUSE mount, the fault's options, and the verdict's words.

The mounts are real (root and /dev/fuse; skipped with the reason elsewhere, a failure under CI=true).
A node of a job is a process whose ELASTIC_CHAOS_NODE_NAME names it, as the local platform starts
them: each "node" here is a subprocess with that variable; the test process itself belongs to no node
(the toolkit's own reads, always fresh).
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from storagefs_helpers import storage_mount

from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv, Event
from elastic_chaos.faults.catalog import faults_for
from elastic_chaos.faults.stale import StaleReadFault, volume_state
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.hypotheses.stale import Load, first_resume, judge, stale_answers
from elastic_chaos.platforms.capabilities import CheckpointStorage
from elastic_chaos.storagefs import Kind, StaleRead, StorageFs
from elastic_chaos.storagefs.callers import NODE_VAR
from elastic_chaos.storagefs.errors import RuleError
from elastic_chaos.storagefs.oplog import OpRecord
from elastic_chaos.storagefs.rules import describe, from_json, to_json


@pytest.fixture
def folder(tmp_path) -> Path:
    path = tmp_path / "ckpt"
    path.mkdir()
    return path


@pytest.fixture
def fs(folder, tmp_path) -> Iterator[StorageFs]:
    with storage_mount(folder, tmp_path / "storage") as storage:
        yield storage


def on(node: str | None, script: str, folder: Path) -> str:
    """Run python ``script`` in ``folder`` as a process of ``node`` (None: of no node); its stdout. A
    failure raises, with its stderr."""
    env = {k: v for k, v in os.environ.items() if k != NODE_VAR}
    if node is not None:
        env[NODE_VAR] = node
    out = subprocess.run([sys.executable, "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


LIST = "import os; print(' '.join(sorted(os.listdir('.'))))"


def read(node: str | None, folder: Path, name: str = "latest") -> str:
    return on(node, f"import pathlib; print(pathlib.Path({name!r}).read_text().strip())", folder)


def exists(node: str | None, folder: Path, name: str) -> bool:
    return on(node, f"import os; print(os.path.exists({name!r}))", folder) == "True"


def replace_like_dcp(folder: Path, step: int) -> str:
    """The reference trainer's pointer update (dcp_checkpoint.write_pointer): a temporary, fsync, rename over."""
    return (f"import os\nwith open('.latest.tmp', 'w') as f:\n    f.write('step-{step:08d}\\n'); f.flush(); "
            f"os.fsync(f.fileno())\nos.replace('.latest.tmp', 'latest')\nos.mkdir('step-{step:08d}')\n"
            f"open('step-{step:08d}/.metadata', 'w').write('x')\n")


def test_a_pointer_renamed_over_reads_back_stale_on_other_nodes_while_the_rule_is_on_and_fresh_after(fs, folder):
    (folder / "latest").write_text("step-00000040\n")
    (folder / "step-00000040").mkdir()
    name = fs.set_rule(StaleRead())
    on("node-0", replace_like_dcp(folder, 60), folder)
    # another node reads the old pointer, and the save folder made since is not there for it
    assert read("node-1", folder) == "step-00000040"
    assert not exists("node-1", folder, "step-00000060")
    assert on("node-1", LIST, folder) == "latest step-00000040"
    # the writer sees its own change; the toolkit's own reads (no node) see the volume as it is
    assert read("node-0", folder) == "step-00000060"
    assert on("node-0", LIST, folder) == "latest step-00000040 step-00000060"
    assert (folder / "latest").read_text().strip() == "step-00000060"
    assert (fs.direct / "latest").read_text().strip() == "step-00000060"
    # the op log says which of node-1's reads the stale view answered
    answered = stale_answers(fs.ops(), name, 0.0)
    assert set(answered) == {"node-1"} and {"latest", "step-00000060"} <= set(answered["node-1"])
    assert [r for r in fs.ops() if r.op == "lookup" and r.path == "step-00000060" and r.node == "node-1"][0].error \
        == "ENOENT"
    assert fs.clear_rule(name) == [name]
    assert read("node-1", folder) == "step-00000060"
    assert exists("node-1", folder, "step-00000060/.metadata")
    assert on("node-1", LIST, folder) == "latest step-00000040 step-00000060"


def test_a_torch_save_rewritten_in_place_loads_its_old_tensors_on_a_stale_node(fs, folder):
    torch.save({"w": torch.zeros(256), "step": 40}, folder / "last.pt")
    fs.set_rule(StaleRead(path="*.pt"))
    on("node-0", "import torch; torch.save({'w': torch.ones(256), 'step': 60}, 'last.pt')", folder)  # O_TRUNC
    load = "import torch; s = torch.load('last.pt'); print(s['step'], float(s['w'].sum()))"
    assert on("node-1", load, folder) == "40 0.0"
    assert on("node-0", load, folder) == "60 256.0"
    assert torch.load(folder / "last.pt")["step"] == 60
    # node-1 writing the file it holds stale: ESTALE, and the kernel's retry (as for NFS) writes the file as it
    # is now; node-1 reads it afresh from then on
    on("node-1", "import torch; torch.save({'w': torch.full((256,), 2.0), 'step': 80}, 'last.pt')", folder)
    assert on("node-1", load, folder) == "80 512.0"
    assert [r.error for r in fs.ops() if r.op == "open" and r.node == "node-1"][:1] == ["ESTALE"]
    assert torch.load(folder / "last.pt")["step"] == 80
    fs.clear_rule()
    assert on("node-0", load, folder) == "80 512.0"


def test_a_removed_file_stays_listed_and_loadable_on_a_stale_node(fs, folder):
    for step in (20, 40):
        torch.save({"step": step}, folder / f"ckpt-{step:08d}.pt")
    fs.set_rule(StaleRead())
    on("node-0", "import os, torch; torch.save({'step': 60}, '.ckpt-00000060.pt.tmp'); "
                 "os.replace('.ckpt-00000060.pt.tmp', 'ckpt-00000060.pt'); os.unlink('ckpt-00000020.pt')", folder)
    assert on("node-1", LIST, folder) == "ckpt-00000020.pt ckpt-00000040.pt"
    assert on("node-1", "import torch; print(torch.load('ckpt-00000020.pt', mmap=True)['step'])", folder) == "20"
    assert on("node-0", LIST, folder) == "ckpt-00000040.pt ckpt-00000060.pt"
    fs.clear_rule()
    assert on("node-1", LIST, folder) == "ckpt-00000040.pt ckpt-00000060.pt"


def test_a_rule_for_one_node_leaves_the_other_nodes_fresh(fs, folder):
    (folder / "latest").write_text("step-00000040\n")
    fs.set_rule(StaleRead(path="latest"), node="node-1")
    on("node-0", replace_like_dcp(folder, 60), folder)
    assert read("node-1", folder) == "step-00000040"
    assert read("node-2", folder) == "step-00000060"
    assert exists("node-1", folder, "step-00000060")   # outside --stale-path: as it is


def test_inside_a_folder_made_since_a_node_that_sees_the_folder_sees_what_others_wrote_there(fs, folder):
    (folder / "step-00000040").mkdir()
    fs.set_rule(StaleRead())
    on("node-0", "import os; os.mkdir('step-00000060'); open('step-00000060/__0_0.distcp', 'w').write('0')", folder)
    # DCP's writers each make the save's folder (exist_ok): EEXIST, and node-1 sees the folder from then on
    on("node-1", "import pathlib; pathlib.Path('step-00000060').mkdir(exist_ok=True); "
                 "open('step-00000060/__1_0.distcp', 'w').write('1')", folder)
    assert on("node-1", "import os; print(' '.join(sorted(os.listdir('step-00000060'))))", folder) == \
        "__0_0.distcp __1_0.distcp"
    assert not exists("node-2", folder, "step-00000060")   # never made it: the folder is not there for node-2
    on("node-1", "import shutil; shutil.rmtree('step-00000060')", folder)   # a prune removes every rank's shard
    assert not (fs.direct / "step-00000060").exists()


def test_the_rule_travels_as_json_and_refuses_an_absolute_path():
    rule = StaleRead(path="latest")
    assert from_json(to_json(rule)) == rule and rule.ops == {Kind.LOOKUP, Kind.READDIR}
    assert describe(rule) == "stale-read path=latest"
    with pytest.raises(RuleError, match="without a leading /"):
        StaleRead(path="/latest")


def last_line(text: str) -> str:
    return text.splitlines()[-1] if text else ""


SAVE = ("from pathlib import Path; from elastic_chaos.trainer import checkpoint\n"
        "for step in {steps}:\n    checkpoint.save(Path('.'), step, {{'model': {{}}}}, keep=3)\n")
NEWEST = ("from pathlib import Path; from elastic_chaos.trainer import checkpoint\n"
          "print(checkpoint.load_newest(Path('.')).step)")


def test_the_reference_trainers_file_restore_on_a_stale_node_resumes_from_the_save_newest_when_reads_went_stale(
        fs, folder):
    on("node-0", SAVE.format(steps=[20, 40]), folder)
    fs.set_rule(StaleRead())
    on("node-0", SAVE.format(steps=[60, 80]), folder)   # the third save prunes ckpt-20 on the volume
    assert last_line(on("node-0", NEWEST, folder)) == "80"
    assert last_line(on("node-1", NEWEST, folder)) == "40"   # a listing without 60 and 80: no error, no word
    assert sorted(p.name for p in fs.direct.iterdir() if not p.name.startswith(".")) == [
        "ckpt-00000040.pt", "ckpt-00000060.pt", "ckpt-00000080.pt"]
    fs.clear_rule()
    assert last_line(on("node-1", NEWEST, folder)) == "80"


def test_the_reference_trainers_dcp_restore_on_a_stale_node_follows_the_old_latest_pointer(fs, folder):
    pointer = ("from pathlib import Path; from elastic_chaos.trainer import dcp_checkpoint as d\n"
               "for step in {steps}:\n    f = d.step_folder(Path('.'), step); f.mkdir()\n"
               "    (f / d.METADATA).write_bytes(b'x'); d.write_pointer(Path('.'), f)\n")
    candidates = ("from pathlib import Path; from elastic_chaos.trainer import dcp_checkpoint as d\n"
                  "print(' '.join(f.name for f in d.resume_candidates(Path('.'))))")
    on("node-0", pointer.format(steps=[20, 40]), folder)
    fs.set_rule(StaleRead())
    on("node-0", pointer.format(steps=[60, 80]), folder)
    assert on("node-0", candidates, folder) == "step-00000080 step-00000060 step-00000040 step-00000020"
    assert on("node-1", candidates, folder) == "step-00000040 step-00000020"
    fs.clear_rule()
    assert on("node-1", candidates, folder).startswith("step-00000080 ")


# -- the fault -------------------------------------------------------------------------------
def test_the_fault_is_a_storage_fault_of_every_platform_with_the_layer_and_its_hypothesis_compares_the_final_state():
    assert faults_for("local")["stale-read"] is StaleReadFault
    assert faults_for("kubernetes")["stale-read"] is StaleReadFault
    assert StaleReadFault.requires is CheckpointStorage
    assert StaleReadFault().rules() == (StaleRead(path="*"),)
    assert StaleReadFault(stale_path="latest", duration_s=30).rules() == (StaleRead(path="latest"),)
    forced = get("stale-read").forced
    assert forced["storage_layer"] is True and forced["compare_final"] is True


@pytest.mark.parametrize("values, message", [
    ({"stale_path": "/checkpoints/latest"}, "stale-read --stale-path: path pattern '/checkpoints/latest'"),
    ({"stale_path": ""}, "stale-read --stale-path"),
    ({"duration_s": 0}, "duration_s 0: must be a finite number > 0"),
    ({"duration_s": -5}, "duration_s -5"),
])
def test_bad_fault_options_are_refused_as_the_users_input(values, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        StaleReadFault(**values)


@pytest.mark.parametrize("args, message", [
    (["--stale-path", "/latest"], "without a leading /"),
    (["--saves-after", "0"], "--saves-after: 0: must be a whole number >= 1"),
    (["--duration", "nan"], "--duration"),
])
def test_bad_options_on_the_command_line_exit_2_with_a_message(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", "stale-read", *args,
                          "--report-dir", str(tmp_path / "r"), "--dry-run"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_the_record_keeps_what_the_volume_held(tmp_path):
    (tmp_path / "ckpt-00000040.pt").write_bytes(b"x")
    (tmp_path / ".ckpt-00000060.pt.tmp.host.1").write_bytes(b"x")
    (tmp_path / "step-00000040").mkdir()
    (tmp_path / "step-00000040" / ".metadata").write_bytes(b"x")
    (tmp_path / "latest").write_text("step-00000040\n")
    held = volume_state(tmp_path)
    assert held["files"] == ["ckpt-00000040.pt", "latest"]
    assert held["complete"] == ["step-00000040"] and held["pointer"] == "step-00000040"


# -- the verdict -----------------------------------------------------------------------------
def loads(*steps: int) -> list[Load]:
    return [Load(f"node-{i + 1}", i, s) for i, s in enumerate(steps)]


def test_a_silent_resume_from_the_save_newest_when_reads_went_stale_fails_naming_the_steps_trained_again():
    ok, said = judge(newest=80, stale_newest=40, loads=loads(40, 40), unloadable=[], regained=True, rolled_back=84)
    assert not ok
    assert said == ("the job resumed from step 40, older than the newest complete save (step 80), without reporting a "
                    "save it could not load (no load error, no checksum mismatch); step 40 was the newest save when "
                    "reads went stale; steps 41-80, already saved, were trained again (the sample account: 84 step "
                    "executions rolled back in all)")


def test_a_resume_from_the_newest_save_a_noticed_one_and_a_loud_failure_hold():
    ok, said = judge(newest=80, stale_newest=40, loads=loads(80, 80), unloadable=[])
    assert ok and said.startswith("the job resumed from step 80, the newest complete save, though its nodes read")
    ok, said = judge(newest=80, stale_newest=40, loads=loads(60, 60),
                     unloadable=[("step-00000080", "CheckpointException: ...")])
    assert ok and said.startswith("the job noticed: it reported step-00000080 unloadable")
    ok, said = judge(newest=80, stale_newest=40, loads=[], unloadable=[], failed="the job failed: exit 1")
    assert ok and said.startswith("the job failed loudly after the kill")


def test_ranks_that_resume_from_different_saves_fail_naming_each():
    ok, said = judge(newest=80, stale_newest=40, loads=loads(80, 40), unloadable=[])
    assert not ok
    assert said.startswith("the ranks resumed from different saves after the kill (rank 0 on node-1 from step 80, "
                           "rank 1 on node-2 from step 40): one world trained on from 2 states")


def test_a_silent_older_resume_before_a_failure_still_fails():
    ok, said = judge(newest=80, stale_newest=40, loads=loads(40), unloadable=[], failed="timed out")
    assert not ok and "without reporting a save it could not load, then failed: timed out" in said


def test_stale_answers_name_each_nodes_paths_once_after_the_kill():
    ops = [OpRecord(t=1.0, op="lookup", path="latest", node="node-1", rule="stale-read-1"),
           OpRecord(t=5.0, op="lookup", path="latest", node="node-1", rule="stale-read-1"),
           OpRecord(t=5.0, op="lookup", path="latest", node="node-1", rule="stale-read-1"),
           OpRecord(t=6.0, op="readdir", path="", node="node-2", rule="latency-2,stale-read-1"),
           OpRecord(t=6.0, op="open", path="latest", node="node-2", rule="stale-read-1"),
           OpRecord(t=7.0, op="lookup", path="x", node="node-2", rule="stale-read-9")]
    assert stale_answers(ops, "stale-read-1", 2.0) == {"node-1": ["latest"], "node-2": ["the folder"]}


def test_the_restart_is_each_ranks_first_restore_after_the_kill_until_its_world_is_in():
    def loaded(t: float, node: str, rank: int, step: int, world: int = 2) -> Event:
        return Event.make(CheckpointEv.LOADED, t, node, {"step": step, "rank": rank, "world_size": world})
    events = [loaded(1.0, "node-0", 0, 20), loaded(5.0, "node-1", 1, 40), loaded(5.1, "node-2", 0, 40),
              loaded(9.0, "node-1", 0, 60), loaded(9.1, "node-2", 1, 60)]
    assert first_resume(events, 2.0) == [Load("node-1", 1, 40), Load("node-2", 0, 40)]
    # a rank that restores again before its world is in starts another resume
    assert first_resume([loaded(5.0, "node-1", 0, 40, world=3), loaded(6.0, "node-1", 0, 40, world=3)], 2.0) == [
        Load("node-1", 0, 40)]
