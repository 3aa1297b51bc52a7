"""Node-local working directories (JobSpec.node_local_workdir), without a job: the local
platform's disks (elastic_chaos.platforms.local.disks), the file watcher on every node's folder,
the observation block, the Kubernetes pod's emptyDir, and the option's refusals. The
real jobs that use it are in tests/test_script_shapes.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_chaos.analysis.observation import checks, summarize
from elastic_chaos.errors import SpecError
from elastic_chaos.events import CheckpointEv, Event, NodeEv, ProgressEv, Timeline, of
from elastic_chaos.events.progress_events import Step
from elastic_chaos.hypotheses.api import settings
from elastic_chaos.platforms.kubernetes.manifests import NODE_DISK_MOUNT, kind_settings, pod_template, workdir
from elastic_chaos.platforms.local.disks import FOLDER, NodeDisks
from elastic_chaos.runner import folder
from elastic_chaos.spec import LOCAL_DIR_VAR, SHARED_DIR_VAR, JobSpec, Observation
from elastic_chaos.watchers.checkpoints import CheckpointWatcher, NodeRoots

SCRIPT = ("train.py",)


def test_a_node_starts_on_an_empty_disk_of_its_own_and_its_environment_names_it(tmp_path):
    disks = NodeDisks(tmp_path / FOLDER, Timeline())
    stale = tmp_path / FOLDER / "node-0"
    stale.mkdir(parents=True)
    (stale / "snapshot.pt").write_bytes(b"not this node's")
    path = disks.create("node-0")
    assert path == stale and list(path.iterdir()) == []
    assert disks.env("node-0", tmp_path / "workdir") == {LOCAL_DIR_VAR: str(path),
                                                         SHARED_DIR_VAR: str(tmp_path / "workdir")}


def test_a_lost_nodes_disk_is_gone_and_the_timeline_says_what_it_held(tmp_path):
    tl = Timeline()
    disks = NodeDisks(tmp_path / FOLDER, tl)
    for node in ("node-0", "node-1"):
        disks.create(node)
    (disks.path("node-1") / "ckpt").mkdir()
    (disks.path("node-1") / "ckpt" / "epoch=3.ckpt").write_bytes(b"x" * 10)
    (disks.path("node-1") / "snapshot.pt").write_bytes(b"y" * 5)
    lost = disks.lose("node-1")
    assert not disks.path("node-1").exists() and set(disks.live()) == {"node-0"}
    assert lost.count == 2 and lost.size == 15 and lost.files == ("ckpt/epoch=3.ckpt", "snapshot.pt")
    [said] = of(tl.events(), NodeEv.DISK_LOST)
    assert said.node == "node-1" and said.data.count == 2 and said.data.files == lost.files
    assert disks.lose("node-1").count == 0  # already gone: nothing more to lose


def test_every_nodes_folder_is_watched_and_a_save_there_is_that_nodes(tmp_path):
    tl = Timeline()
    disks = NodeDisks(tmp_path / FOLDER, tl)
    disks.create("node-0")
    disks.create("node-1")
    (disks.path("node-0") / "snapshot.pt").write_bytes(b"there before the watch")
    tl.emit(ProgressEv.STEP, "node-0", Step(step=4, via="regex"), t=1.0)
    roots = NodeRoots(disks.live, "snapshot.pt")
    w = CheckpointWatcher(tl, roots)
    w.poll()  # the baseline
    (disks.path("node-1") / "snapshot.pt").write_bytes(b"epoch 4 of node-1")
    disks.lose("node-0")
    disks.create("node-2")  # the replacement's disk appears after the start: empty, so a file there is new
    (disks.path("node-2") / "snapshot.pt").write_bytes(b"epoch 6 of node-2")
    w.poll()
    w.poll()
    saved = of(tl.events(), CheckpointEv.SAVED)
    assert sorted((e.node, Path(e.data.path).parent.name) for e in saved) == [("node-1", "node-1"),
                                                                              ("node-2", "node-2")]
    assert set(roots.seen) == {"node-0", "node-1", "node-2"}


def test_the_observation_says_where_node_local_checkpoints_were_watched(tmp_path):
    job = JobSpec(script=SCRIPT, node_local_workdir=True,
                  observe=Observation(progress_regex=r"epoch (?P<step>\d+)", checkpoint="snapshot.pt"))
    disks = tmp_path / FOLDER
    (disks / "node-0").mkdir(parents=True)
    (disks / "node-0" / "state.json").write_text("{}")
    folders = {"node-0": disks / "node-0", "node-1": disks / "node-1"}  # node-1 was lost
    events = [Event.make(ProgressEv.STEP, 1.0, "node-0", {"step": 1, "via": "regex"})]
    seen = summarize(events, job, tmp_path / "workdir", node_workdirs=folders)
    assert seen is not None and seen.node_local and seen.checkpoint is not None
    assert seen.checkpoint.watched == str(disks / "*" / "snapshot.pt") and seen.checkpoint.never_written
    assert seen.checkpoint.files_in_workdir == ("node-0/state.json",)
    assert any("folder of its own" in note for note in seen.notes)
    assert not checks(seen)[-1][0]  # never written: a wrong path fails, as on a shared workdir
    saved = [*events, Event.make(CheckpointEv.SAVED, 2.0, "node-0", {"path": str(disks / "node-0" / "snapshot.pt"),
                                                                     "via": "file", "step": 1})]
    ok = summarize(saved, job, tmp_path / "workdir", node_workdirs=folders)
    assert ok is not None and ok.checkpoint is not None and ok.checkpoint.saves_observed == 1
    assert type(ok).from_json(ok.to_json()) == ok


def test_node_local_folders_not_on_this_machine_are_not_watched_and_said_so(tmp_path):
    job = JobSpec(script=SCRIPT, node_local_workdir=True, observe=Observation(checkpoint="snapshot.pt"))
    seen = summarize([], job, None, node_workdirs={})
    assert seen is not None and seen.checkpoint is not None and seen.checkpoint.watched is None
    assert checks(seen) == [(None, "whether the script saved to 'snapshot.pt': the nodes' own folders are not "
                                   "on this machine")]


def test_the_option_is_for_a_script_and_a_flag_of_run(tmp_path):
    with pytest.raises(SpecError, match="node_local_workdir is for a training script"):
        JobSpec(node_local_workdir=True)
    s = settings(None, {"script": list(SCRIPT), "node_local_workdir": True}, "local")
    assert s.job.node_local_workdir and JobSpec.from_json(s.job.to_json()).node_local_workdir


def test_overwriting_a_report_folder_deletes_the_old_runs_node_disks(tmp_path):
    report = tmp_path / "report"
    (report / "nodes").mkdir(parents=True)
    (report / "timeline.jsonl").write_text("")
    (report / FOLDER / "node-0").mkdir(parents=True)
    (report / FOLDER / "node-0" / "snapshot.pt").write_bytes(b"old")
    folder.prepare(report, overwrite=True)
    assert not (report / FOLDER).exists()


def test_on_kubernetes_each_pod_works_on_an_emptydir_of_its_own():
    job = JobSpec(nodes="1:2", script=SCRIPT, node_local_workdir=True)
    spec = pod_template(job, kind_settings(), ["python"], ["train.py"])["spec"]
    [container] = spec["containers"]
    assert {"name": "node-disk", "emptyDir": {}} in spec["volumes"]
    assert {"name": "node-disk", "mountPath": NODE_DISK_MOUNT} in container["volumeMounts"]
    assert container["workingDir"] == NODE_DISK_MOUNT
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[LOCAL_DIR_VAR] == NODE_DISK_MOUNT and env[SHARED_DIR_VAR] == workdir(job)
    plain = JobSpec(nodes="1:2", script=SCRIPT)
    shared = pod_template(plain, kind_settings(), ["python"], ["train.py"])["spec"]
    assert all(v["name"] != "node-disk" for v in shared["volumes"])
    assert shared["containers"][0]["workingDir"] == workdir(plain)
