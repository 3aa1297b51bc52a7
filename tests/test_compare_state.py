"""The final-state oracle's torch side: what it calls equal, what it names first, what it refuses."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from elastic_chaos.trainer import compare_state as cs


def state(**over: object) -> dict[str, object]:
    s: dict[str, object] = {
        "step": 100,
        "model": {"0.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3), "0.bias": torch.zeros(2)},
        "optim": {"state": {0: {"momentum_buffer": torch.ones(3)}},
                  "param_groups": [{"lr": 0.01, "initial_lr": 0.1, "params": [0]}]},
        "sched": {"last_epoch": 100, "_step_count": 101, "_last_lr": [0.01]},
        "rng": {"torch": torch.tensor([1, 2, 3], dtype=torch.uint8)},
        "sampler": {"epoch": 3, "cursor": 512},
    }
    s.update(over)
    return s


def save(tmp_path: Path, name: str, obj: object) -> Path:
    path = tmp_path / name
    torch.save(obj, path)
    return path


def test_identical_checkpoints_are_equal_bitwise(tmp_path):
    out = cs.compare(save(tmp_path, "a.pt", state()), save(tmp_path, "b.pt", state()))
    assert out["equal"] and out["first"] is None and out["comparison"] == "bitwise"
    assert out["step"] == {"a": 100, "b": 100}
    # step, 2 weights, 1 buffer, 3 in param_groups, 3 of the scheduler, rng, 2 of the sampler
    assert out["compared"] == 13


@pytest.mark.parametrize(("parts", "expected"), [
    (("model", "0", "weight"), "model"),
    (("module", "fc", "bias"), "model"),
    (("optim", "state", "0", "exp_avg"), "optimizer"),
    (("optimizer", "param_groups", "0", "lr"), "lr_scheduler"),
    (("optimizer", "param_groups", "0", "momentum"), "optimizer"),
    (("lr_scheduler", "last_epoch"), "lr_scheduler"),
    (("rng", "cuda", "0"), "rng"),
    (("torch_rng_state",), "rng"),
    (("sampler", "epoch"), "data_position"),
    (("train_dataloader", "position"), "data_position"),
    (("global_step",), "data_position"),
    (("scaler", "scale"), "grad_scaler"),
    (("ema", "w"), "model"),
    (("misc", "w"), "other"),
])
def test_a_path_is_classed_by_its_first_naming_key(parts, expected):
    assert cs.state_class(parts) == expected


def test_the_most_causal_divergence_is_named_first_not_the_first_in_walk_order(tmp_path):
    b = state(model={"0.weight": torch.zeros(2, 3), "0.bias": torch.zeros(2)},
              sampler={"epoch": 3, "cursor": 256})
    out = cs.compare(save(tmp_path, "a.pt", state()), save(tmp_path, "b.pt", b))
    assert not out["equal"]
    assert out["first"]["path"] == "sampler.cursor" and out["first"]["state"] == "data_position"
    assert "loader restarted its epoch" in out["first"]["cause"]
    assert out["classes"] == {"model": 1, "data_position": 1}
    assert out["divergences"][1]["path"] == "model.0.weight"
    assert out["divergences"][1]["max_abs_diff"] == 5.0


def test_a_scheduler_left_behind_is_named_by_the_lr(tmp_path):
    b = state(sched={"last_epoch": 40, "_step_count": 41, "_last_lr": [0.02]})
    b["optim"]["param_groups"][0]["lr"] = 0.02   # type: ignore[index]
    out = cs.compare(save(tmp_path, "a.pt", state()), save(tmp_path, "b.pt", b))
    assert out["first"]["state"] == "lr_scheduler" and out["first"]["path"] == "optim.param_groups.0.lr"
    assert "LR scheduler's state is not saved or not restored" in out["first"]["cause"]


def test_an_lr_that_differs_under_an_equal_scheduler_is_the_optimizers_doing(tmp_path):
    b = state(sched={"last_epoch": 100, "_step_count": 101, "_last_lr": [0.1]})
    b["optim"]["param_groups"][0]["lr"] = 0.1   # type: ignore[index]
    out = cs.compare(save(tmp_path, "a.pt", state()), save(tmp_path, "b.pt", b))
    assert out["first"]["state"] == "optimizer" and out["first"]["path"] == "optim.param_groups.0.lr"
    assert "param_groups were not restored" in out["first"]["detail"]


def test_bitwise_tells_negative_zero_and_the_tolerance_forgives_small_differences(tmp_path):
    a = {"model": {"w": torch.tensor([0.0, 1.0])}}
    neg = {"model": {"w": torch.tensor([-0.0, 1.0])}}
    near = {"model": {"w": torch.tensor([0.0, 1.0 + 1e-6])}}
    pa, pn, pr = save(tmp_path, "a.pt", a), save(tmp_path, "n.pt", neg), save(tmp_path, "r.pt", near)
    assert not cs.compare(pa, pn)["equal"]
    assert not cs.compare(pa, pr)["equal"]
    assert cs.compare(pa, pr, tolerance=1e-5)["equal"]
    assert not cs.compare(pa, pr, tolerance=1e-8)["equal"]


def test_nan_in_the_same_place_is_equal_and_elsewhere_is_not(tmp_path):
    nan = float("nan")
    pa = save(tmp_path, "a.pt", {"model": {"w": torch.tensor([nan, 1.0])}})
    same = save(tmp_path, "b.pt", {"model": {"w": torch.tensor([nan, 1.0])}})
    moved = save(tmp_path, "c.pt", {"model": {"w": torch.tensor([1.0, nan])}})
    assert cs.compare(pa, same)["equal"] and cs.compare(pa, same, tolerance=0.1)["equal"]
    assert not cs.compare(pa, moved, tolerance=10.0)["equal"]


def test_shape_dtype_missing_keys_and_lengths_are_divergences(tmp_path):
    a = {"model": {"w": torch.zeros(2), "v": torch.zeros(2)}, "sched": {"lrs": [1.0, 2.0]}}
    b = {"model": {"w": torch.zeros(3), "v": torch.zeros(2, dtype=torch.float64), "extra": 1}, "sched": {"lrs": [1.0]}}
    out = cs.compare(save(tmp_path, "a.pt", a), save(tmp_path, "b.pt", b))
    details = {d["path"]: d["detail"] for d in out["divergences"]}
    assert details["model.w"] == "torch.float32[2] in A, torch.float32[3] in B"
    assert details["model.v"].startswith("torch.float32[2] in A, torch.float64[2] in B")
    assert details["model.extra"] == "missing in A"
    assert details["sched.lrs"] == "length 2 in A, 1 in B"


def test_a_folder_of_trainer_saves_means_its_newest(tmp_path):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    save(folder, "ckpt-00000020.pt", state(step=20))
    save(folder, "ckpt-00000100.pt", state())
    assert cs.resolve(folder) == folder / "ckpt-00000100.pt"
    assert cs.compare(folder, save(tmp_path, "b.pt", state()))["equal"]


def test_a_dcp_folder_compares_with_a_torch_save_file(tmp_path):
    import torch.distributed.checkpoint as dcp
    with pytest.warns(UserWarning, match="single process"):
        dcp.save(state(), checkpoint_id=str(tmp_path / "step-100"))
    assert (tmp_path / "step-100" / ".metadata").is_file()
    assert cs.compare(save(tmp_path, "a.pt", state()), tmp_path / "step-100")["equal"]
    other = state(rng={"torch": torch.tensor([9, 2, 3], dtype=torch.uint8)})
    out = cs.compare(save(tmp_path, "c.pt", other), tmp_path / "step-100")
    assert out["first"]["path"] == "rng.torch" and out["first"]["state"] == "rng"


@pytest.mark.parametrize("make", ["missing", "text", "empty-folder", "pickled-object"])
def test_bad_input_is_exit_2_with_a_message_never_a_traceback(tmp_path, make):
    good = save(tmp_path, "good.pt", state())
    bad = tmp_path / "bad"
    if make == "text":
        bad.write_text("not a checkpoint")
    elif make == "empty-folder":
        bad.mkdir()
    elif make == "pickled-object":
        torch.save({"model": {"w": torch.zeros(1)}, "cfg": Path("x")}, bad)
    done = subprocess.run([sys.executable, "-m", "elastic_chaos.trainer.compare_state", str(good), str(bad)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert str(bad) in error
    if make == "pickled-object":
        assert "--trust" in error


def test_trust_loads_what_weights_only_refuses(tmp_path):
    obj = {"model": {"w": torch.zeros(1)}, "cfg": Path("x")}
    a, b = save(tmp_path, "a.pt", obj), save(tmp_path, "b.pt", obj)
    with pytest.raises(cs.BadInput):
        cs.compare(a, b)
    assert cs.compare(a, b, trust=True)["equal"]


def test_the_largest_difference_is_over_every_differing_value_not_only_those_listed(tmp_path):
    # more differing tensors than the comparer lists: the largest difference is in one it leaves out
    many = {f"w{i:02d}": torch.zeros(2) for i in range(cs.MAX_LISTED + 3)}
    moved = {k: v + (0.5 if k == f"w{cs.MAX_LISTED + 2:02d}" else 0.001) for k, v in many.items()}
    out = cs.compare(save(tmp_path, "a.pt", {"model": many}), save(tmp_path, "b.pt", {"model": moved}))
    assert len(out["divergences"]) == cs.MAX_LISTED and out["differing"] == cs.MAX_LISTED + 3
    assert out["max_abs_diff"] == 0.5 and out["not_numeric"] == 0
    # an integer step and a shape are compared exactly: no tolerance covers them
    stepped = cs.compare(save(tmp_path, "c.pt", state()), save(tmp_path, "d.pt", state(step=101)))
    assert stepped["not_numeric"] == 1 and stepped["max_abs_diff"] is None
    shaped = cs.compare(save(tmp_path, "e.pt", {"model": {"w": torch.zeros(2)}}),
                        save(tmp_path, "f.pt", {"model": {"w": torch.zeros(3)}}))
    assert shaped["not_numeric"] == 1 and shaped["max_abs_diff"] is None
