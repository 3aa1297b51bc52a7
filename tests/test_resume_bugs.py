"""The final-state oracle against the classic resume bugs (tests/scripts/resume_bugs.py): a resumed run of a
correct script ends equal to its uninterrupted run, and each bug is named by the state it breaks."""
from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from elastic_chaos.trainer import compare_state as cs

SCRIPT = Path(__file__).parent / "scripts" / "resume_bugs.py"
STOP_AT = 33
"""Mid-epoch (8 steps an epoch), off the scheduler's 5-step period: every bug shows by step 40."""


@pytest.fixture(scope="module")
def script() -> dict[str, Any]:
    return runpy.run_path(str(SCRIPT))


def train(script: dict[str, Any], path: Path, bug: str, *, stop_at: int | None = None) -> Path:
    assert script["main"]([f"--checkpoint={path}", f"--bug={bug}", "--max-steps=40",
                           *([f"--stop-at={stop_at}"] if stop_at else [])]) == 0
    return path


def resumed(script: dict[str, Any], path: Path, bug: str) -> Path:
    train(script, path, bug, stop_at=STOP_AT)
    return train(script, path, bug)


@pytest.mark.parametrize(("bug", "state", "path"), [
    ("scheduler", "lr_scheduler", "optim.param_groups.0.lr"),
    ("rng", "rng", "rng.torch"),
    ("sampler-epoch", "data_position", "sampler.epoch"),
    ("loader-restart", "data_position", "data.position"),
    ("optimizer", "optimizer", "optim.state.0.momentum_buffer"),
])
def test_each_resume_bug_is_named_by_the_state_it_breaks(tmp_path, script, bug, state, path):
    reference = train(script, tmp_path / "reference.pt", bug)
    out = cs.compare(reference, resumed(script, tmp_path / "resumed.pt", bug))
    assert not out["equal"]
    assert (out["first"]["state"], out["first"]["path"]) == (state, path)
    assert out["first"]["cause"] == cs.CAUSES[state]


def test_a_correct_script_resumed_mid_epoch_ends_bitwise_equal(tmp_path, script):
    reference = train(script, tmp_path / "reference.pt", "none")
    out = cs.compare(reference, resumed(script, tmp_path / "resumed.pt", "none"))
    assert out["equal"], out["first"]
    assert out["step"] == {"a": 40, "b": 40}
