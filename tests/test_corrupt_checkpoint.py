"""corrupt-checkpoint: bits flipped in a checkpoint's tensor data, exactly the recorded ones; the original
kept and put back; and the reference trainer's --checkpoint-checksum noticing it."""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.events import CheckpointEv, FaultEv, Timeline
from elastic_chaos.events.checkpoint_events import Save
from elastic_chaos.faults.corrupt import FOLDER, CorruptCheckpoint, choose, flip
from elastic_chaos.faults.torchfile import NotATorchFile, storages
from elastic_chaos.platforms.api import CheckpointFolder
from elastic_chaos.trainer import checkpoint


def trainer_state(seed: int = 0) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optim = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(4, 8)).sum().backward()
    optim.step()
    return {"model": model.state_dict(), "optim": optim.state_dict(), "rng": {"torch": torch.get_rng_state()}}


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A checkpoint of step 20 written by the reference trainer's save, in tmp_path/checkpoints."""
    return checkpoint.save(tmp_path / "checkpoints", 20, trainer_state())


@pytest.fixture
def checksums() -> Iterator[None]:
    """The trainer's --checkpoint-checksum for this test only."""
    checkpoint.use_checksums(True)
    yield
    checkpoint.use_checksums(False)


def load(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def test_each_storage_is_found_where_its_tensor_bytes_are_and_named_by_its_path(saved):
    model = load(saved)["model"]
    data = saved.read_bytes()
    found = {s.name: s for s in storages(saved)}
    assert {"model.0.weight", "model.2.bias", "optim.state.0.momentum_buffer", "rng.torch"} <= set(found)
    weight = found["model.0.weight"]
    assert weight.kind == "FloatStorage"
    assert data[weight.offset:weight.offset + weight.size] == bytes(model["0.weight"].untyped_storage())


def test_a_file_that_is_not_a_torch_save_archive_is_refused(tmp_path):
    (tmp_path / "x.pt").write_bytes(b"not a zip")
    with pytest.raises(NotATorchFile, match="not a zip"):
        storages(tmp_path / "x.pt")


def test_the_bytes_that_change_are_exactly_the_recorded_flips(saved, tmp_path):
    before = saved.read_bytes()
    target, positions = choose(storages(saved), seed=7, bits=5, state="model", any_bit=False)
    flips = flip(saved, target, positions)
    after = saved.read_bytes()
    changed = {i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b}
    assert sum(len(f.bits) for f in flips) == 5 and changed == {f.offset for f in flips}
    for f in flips:
        assert (before[f.offset], after[f.offset]) == (f.before, f.after) and f.before ^ f.after == f.mask
        assert target.offset <= f.offset < target.offset + target.size     # inside the tensor's data


def test_the_corrupted_file_still_loads_with_other_values_in_the_tensor_hit_only(saved):
    clean = load(saved)
    target, positions = choose(storages(saved), seed=1, bits=3, state="model", any_bit=False)
    flips = flip(saved, target, positions)
    hit = load(saved)     # no error: torch.load does not check the zip's CRC-32 of the tensor data
    name = target.name.removeprefix("model.")
    for key, value in clean["model"].items():
        differ = (value != hit["model"][key]).flatten().nonzero().flatten().tolist()
        assert differ == (sorted({f.element for f in flips}) if key == name else []), key
    assert all(math.isfinite(v) for v in hit["model"][name].flatten().tolist())   # mantissa bits only


def test_the_same_seed_flips_the_same_bits_and_another_seed_others(saved):
    found = storages(saved)
    one = choose(found, seed=3, bits=4, state="", any_bit=True)
    assert choose(found, seed=3, bits=4, state="", any_bit=True) == one
    assert choose(found, seed=4, bits=4, state="", any_bit=True) != one


def test_a_prefix_that_names_no_tensor_is_refused_naming_those_it_holds(saved):
    with pytest.raises(InjectionFailed, match="model.0.weight"):
        choose(storages(saved), seed=0, bits=1, state="nothing", any_bit=False)


# -- the fault: newest save, the original kept, the revert -------------------------------------
def platform(tmp_path: Path) -> Any:
    """What the fault reads of a platform: its name, the run's folder and the checkpoint folder (the
    local platform's ``work_dir`` and ``checkpoint_dir``)."""
    folder = CheckpointFolder(tmp_path / "checkpoints", PurePosixPath(tmp_path / "checkpoints"))
    return SimpleNamespace(name="local", work_dir=tmp_path, checkpoint_folder=lambda: folder)


def saves(*paths_steps: tuple[Path, int]) -> Timeline:
    timeline = Timeline()
    for path, step in paths_steps:
        timeline.emit(CheckpointEv.SAVED, "node-0", Save(step=step, path=str(path), reason="periodic"))
    return timeline


def test_the_newest_save_is_hit_its_original_kept_and_the_revert_restores_it(tmp_path, saved):
    newer = checkpoint.save(tmp_path / "checkpoints", 40, trainer_state(1))
    original, older = newer.read_bytes(), saved.read_bytes()
    timeline = saves((saved, 20), (newer, 40))
    fault = CorruptCheckpoint(bits=3, seed=0)
    record = fault.inject(platform(tmp_path), timeline)
    assert record.detail["file"] == str(newer.resolve()) and record.detail["step"] == 40
    assert newer.read_bytes() != original and saved.read_bytes() == older    # the older save is not touched
    kept = Path(record.detail["original"])
    assert kept.parent == tmp_path / FOLDER and kept.read_bytes() == original
    assert {f["offset"] for f in record.detail["flips"]} == {i for i, (a, b) in
                                                          enumerate(zip(original, newer.read_bytes(), strict=True))
                                                          if a != b}
    fault.revert(platform(tmp_path), timeline, record)
    assert newer.read_bytes() == original and kept.read_bytes() == original
    fault.revert(platform(tmp_path), timeline, record)      # idempotent: nothing left to undo
    assert len(timeline.select(FaultEv.REVERTED)) == 1


def test_a_file_the_job_rewrote_since_is_not_reverted(tmp_path, saved):
    timeline = saves((saved, 20))
    fault = CorruptCheckpoint()
    record = fault.inject(platform(tmp_path), timeline)
    rewritten = checkpoint.save(tmp_path / "checkpoints", 20, trainer_state(2)).read_bytes()
    fault.revert(platform(tmp_path), timeline, record)
    assert saved.read_bytes() == rewritten and not timeline.select(FaultEv.REVERTED)
    assert Path(record.detail["original"]).is_file()       # the original is kept all the same


def test_a_save_outside_the_run_checkpoint_folder_is_never_touched(tmp_path):
    elsewhere = checkpoint.save(tmp_path / "elsewhere", 20, trainer_state())
    before = elsewhere.read_bytes()
    with pytest.raises(InjectionFailed, match="no checkpoint the job reported saved"):
        CorruptCheckpoint().inject(platform(tmp_path), saves((elsewhere, 20)))
    assert elsewhere.read_bytes() == before and not (tmp_path / FOLDER).exists()


def test_a_platform_without_a_checkpoint_folder_here_cannot_make_it():
    other = SimpleNamespace(name="kubernetes", lacks=lambda _c: None, checkpoint_folder=lambda: None)
    assert "does not keep it here" in (CorruptCheckpoint().unavailable(other) or "")


# -- the reference trainer's --checkpoint-checksum --------------------------------------------
def corrupt_newest(folder: Path) -> None:
    newest = checkpoint.list_checkpoints(folder)[0]
    flip(newest, *choose(storages(newest), seed=0, bits=2, state="model", any_bit=False))


def test_without_checksums_a_restore_loads_the_corrupted_save_silently(tmp_path, capsys):
    checkpoint.save(tmp_path, 20, trainer_state())
    checkpoint.save(tmp_path, 40, trainer_state(1))
    corrupt_newest(tmp_path)
    loaded = checkpoint.load_newest(tmp_path)
    assert loaded is not None and loaded.step == 40
    assert "checkpoint_corrupt" not in capsys.readouterr().out


def test_with_checksums_a_restore_reports_the_corrupted_save_and_falls_back(tmp_path, capsys, checksums):
    checkpoint.save(tmp_path, 20, trainer_state())
    checkpoint.save(tmp_path, 40, trainer_state(1))
    assert checkpoint.load_newest(tmp_path).step == 40      # an intact save verifies
    corrupt_newest(tmp_path)
    loaded = checkpoint.load_newest(tmp_path)
    out = capsys.readouterr().out
    assert loaded is not None and loaded.step == 20
    assert '"ev":"checkpoint_corrupt"' in out and "ChecksumMismatch" in out and "ckpt-00000040.pt" in out


def test_with_checksums_a_save_written_without_a_sum_still_loads(tmp_path, checksums):
    checkpoint.use_checksums(False)
    checkpoint.save(tmp_path, 20, trainer_state())
    checkpoint.use_checksums(True)
    assert checkpoint.load_newest(tmp_path).step == 20


def test_the_state_digest_of_a_save_is_the_digest_of_what_loads_back(tmp_path):
    state = {"format_version": 1, "step": 20, **trainer_state()}
    path = tmp_path / "x.pt"
    torch.save(state, path)
    assert checkpoint.state_digest(load(path)) == checkpoint.state_digest(state)
