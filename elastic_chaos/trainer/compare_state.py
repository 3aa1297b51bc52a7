"""Compare two checkpoints tensor by tensor: the final-state oracle's torch side.

``python -m elastic_chaos.trainer.compare_state A B [--tolerance T]`` runs under
the nodes' python (the toolkit's own process never imports torch). It loads two
checkpoints, walks their nested dicts and lists of tensors and plain values, and
prints one JSON object: whether they are equal, and if not, the divergence that
most likely explains the others, with its state class and a likely cause.

A checkpoint is a ``torch.save`` file; a ``torch.distributed.checkpoint`` (DCP)
folder (its ``.metadata`` and shards, merged with torch's ``dcp_to_torch_save``);
or a folder of the reference trainer's ``ckpt-<step>.pt`` files (the newest is
taken) or of its DCP saves (``step-<step>/``: the one ``latest`` names). Files are
loaded ``weights_only`` unless ``--trust`` is given.

Each leaf's path (``optim.state.0.momentum_buffer``) is put in a state class by
its keys: model, optimizer, lr_scheduler, rng, data_position, grad_scaler, or
other. A resume bug shows in several classes at once (a scheduler not restored
changes the LR, then the optimizer's state, then the weights), so the divergence
reported is the first of the most causal class: data position, LR scheduler,
RNG, gradient scaler, optimizer, model, then other; within a class, the first in
walk order. Comparison is bitwise (the bytes of each tensor) at tolerance 0;
with a tolerance, a floating value may differ by at most that much (absolute).

Exit status: 0 equal, 1 diverged, 2 bad input (a missing path, a file that is not
a checkpoint); the JSON says which (``{"error": ...}`` for 2).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from elastic_chaos.trainer.dcp_checkpoint import resume_candidates

EXIT_EQUAL, EXIT_DIVERGED, EXIT_BAD_INPUT = 0, 1, 2
MAX_LISTED = 10
"""Divergences listed besides the first (the count covers them all)."""

CLASS_ORDER = ("data_position", "lr_scheduler", "rng", "grad_scaler", "optimizer", "model", "other")
"""Most causal first: a data position or LR that differs explains weights that differ, not the reverse."""

CAUSES = {
    "data_position": "the data position differs: the sampler's epoch is not set, or the data loader restarted its "
                     "epoch on resume (or the position is not saved or not restored)",
    "lr_scheduler": "the learning rate differs: the LR scheduler's state is not saved or not restored",
    "rng": "an RNG state differs: the RNG state is not restored on resume (torch, CUDA, numpy or python generator)",
    "grad_scaler": "the gradient scaler's state is not saved or not restored (it restarted from its initial scale)",
    "optimizer": "the optimizer's state (momentum, Adam moments, step counts) is not saved or not restored",
    "model": "only the model's weights differ: something the checkpoint does not hold changed training "
             "(an unsaved RNG or data order, a nondeterministic kernel, another world size)",
    "other": "state outside the known classes differs",
}

_DATA_WORDS = {"epoch", "step", "global_step", "steps", "samples_seen", "samples", "cursor", "consumed_samples",
               "iteration", "iter", "data_position", "position", "batch_idx", "batches_seen"}


class BadInput(Exception):
    """A path that is missing or is not a checkpoint: exit 2 with this message."""


def state_class(parts: tuple[str, ...]) -> str:
    """The state class of a leaf at ``parts`` (its keys from the root), by the first key that names one."""
    lowered = tuple(p.lower() for p in parts)
    for i, p in enumerate(lowered):
        if "sched" in p:
            return "lr_scheduler"
        if "optim" in p:
            return _optimizer_class(lowered[i + 1:])
        if "rng" in p or "random" in p or p == "generator":
            return "rng"
        if "scaler" in p:
            return "grad_scaler"
        if "sampler" in p or "loader" in p or p in _DATA_WORDS:
            return "data_position"
        if "model" in p or "module" in p or p in {"net", "network", "ema"}:
            return "model"
    return "other"


def _own_scheduler_state(parts: tuple[str, ...]) -> bool:
    """A scheduler's own counters (``last_epoch``, ``_step_count``): not an LR it copied from the optimizer."""
    return (state_class(parts) == "lr_scheduler" and "param_groups" not in parts
            and not any("lr" in p.lower() and "sched" not in p.lower() for p in parts))


def _optimizer_class(rest: tuple[str, ...]) -> str:
    """An optimizer's learning rate is the scheduler's doing; the rest is the optimizer's own."""
    if "param_groups" in rest and rest[-1] in {"lr", "initial_lr"}:
        return "lr_scheduler"
    return "optimizer"


@dataclass
class Divergence:
    path: str
    state: str
    detail: str
    max_abs_diff: float | None = None
    floating: bool = False
    """A difference of floating values (a tolerance can cover it); an integer, a shape, a type cannot be."""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "state": self.state, "detail": self.detail, "max_abs_diff": self.max_abs_diff,
                "cause": CAUSES[self.state]}


@dataclass
class Walk:
    """The comparison of two loaded checkpoints, leaf by leaf."""

    tolerance: float
    compared: int = 0
    found: list[Divergence] = field(default_factory=list)
    scheduler_leaves: int = 0
    """Leaves of a scheduler's own counters compared (not an LR)."""

    def walk(self, a: Any, b: Any, parts: tuple[str, ...] = ()) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            self._dicts(a, b, parts)
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
            self._sequences(a, b, parts)
        else:
            self.compared += 1
            self.scheduler_leaves += _own_scheduler_state(parts)
            detail, diff = self._leaf(a, b)
            if detail is not None:
                self.found.append(Divergence(".".join(parts) or "(root)", state_class(parts), detail, diff,
                                             floating=diff is not None and _floating(a, b)))

    def attribute_lr(self) -> None:
        """An LR that differs while the scheduler's own counters were compared equal: the optimizer's
        ``param_groups`` were not restored (the scheduler was), so the optimizer's doing."""
        own = [d for d in self.found if d.state == "lr_scheduler" and _own_scheduler_state(tuple(d.path.split(".")))]
        if self.scheduler_leaves == 0 or own:
            return
        for d in self.found:
            if d.state == "lr_scheduler":
                d.state = "optimizer"
                d.detail += " (the scheduler's counters are equal: the optimizer's param_groups were not restored)"

    def _dicts(self, a: dict[Any, Any], b: dict[Any, Any], parts: tuple[str, ...]) -> None:
        # keys by their text: a DCP folder gives the optimizer's parameter ids as strings, torch.save ints
        sa, sb = {str(k): v for k, v in a.items()}, {str(k): v for k, v in b.items()}
        for key in [*sa, *(k for k in sb if k not in sa)]:
            here = (*parts, key)
            if key not in sa or key not in sb:
                side = "A" if key not in sa else "B"
                self.found.append(Divergence(".".join(here), state_class(here), f"missing in {side}"))
                continue
            self.walk(sa[key], sb[key], here)

    def _sequences(self, a: list[Any] | tuple[Any, ...], b: list[Any] | tuple[Any, ...],
                   parts: tuple[str, ...]) -> None:
        if len(a) != len(b):
            self.found.append(Divergence(".".join(parts), state_class(parts), f"length {len(a)} in A, {len(b)} in B"))
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            self.walk(x, y, (*parts, str(i)))

    def _leaf(self, a: Any, b: Any) -> tuple[str | None, float | None]:
        """Why leaf ``a`` differs from ``b`` (None: equal), and the largest absolute difference if numeric."""
        a, b = _as_tensor(a), _as_tensor(b)
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return _tensors(a, b, self.tolerance)
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or type(a) is not type(b):
            return f"{type(a).__name__} in A, {type(b).__name__} in B", None
        if isinstance(a, float) and isinstance(b, float):
            return _floats(a, b, self.tolerance)
        if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
            return (None, None) if a == b else (f"{a} in A, {b} in B", float(abs(a - b)))
        return (None, None) if _plain_equal(a, b) else (f"{_short(a)} in A, {_short(b)} in B", None)


def _floating(a: Any, b: Any) -> bool:
    """Whether both values are floating point (a float, a floating tensor or array)."""
    a, b = _as_tensor(a), _as_tensor(b)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.is_floating_point() and b.is_floating_point()
    return isinstance(a, float) and isinstance(b, float)


def _as_tensor(v: Any) -> Any:
    """A numpy array (a numpy RNG state, a loaded with --trust) as a tensor; anything else as it is."""
    if type(v).__module__ == "numpy" and hasattr(v, "shape"):
        return torch.as_tensor(v)
    return v


def _plain_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a truth value for ==: compared by its text
        return repr(a) == repr(b)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _floats(a: float, b: float, tolerance: float) -> tuple[str | None, float | None]:
    if a == b or (math.isnan(a) and math.isnan(b)):
        return None, None
    diff = abs(a - b)
    if tolerance > 0 and diff <= tolerance:
        return None, diff
    return f"{a!r} in A, {b!r} in B", diff


def _tensors(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> tuple[str | None, float | None]:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} in A, {b.dtype}{list(b.shape)} in B", None
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    diff = _max_abs_diff(a, b)
    if tolerance > 0 and a.is_floating_point():
        same_nan = bool(torch.equal(torch.isnan(a), torch.isnan(b)))
        if same_nan and (diff is None or diff <= tolerance):
            return None, diff
    elif _bitwise_equal(a, b):
        return None, diff
    numel = a.numel()
    unequal = int((a != b).sum()) if a.dtype != torch.bool else int((a ^ b).sum())
    return f"{unequal} of {numel} elements differ", diff


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.numel() == 0:
        return True
    return bool(torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float | None:
    if a.numel() == 0 or a.dtype == torch.bool or a.is_complex():
        return None
    d = (a.double() - b.double()).abs()
    d = d[~torch.isnan(d)]
    return float(d.max()) if d.numel() else None


# -- loading ---------------------------------------------------------------------
_CKPT = re.compile(r"^ckpt-(\d+)\.pt$")


def resolve(path: Path) -> Path:
    """The checkpoint ``path`` names: itself (a file or a DCP folder), a folder's newest ``ckpt-N.pt``, or of a
    folder of the reference trainer's DCP saves (``step-N/``), the one its ``latest`` names (else the newest
    complete one)."""
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    if path.is_file() or (path / ".metadata").is_file():
        return path
    steps = sorted(((int(m[1]), p) for p in path.iterdir() if (m := _CKPT.match(p.name))), reverse=True)
    if not steps:
        folders = resume_candidates(path)
        if folders:
            return folders[0]
        raise BadInput(f"{path}: a folder that is neither a torch.distributed.checkpoint folder (no .metadata) "
                       "nor a folder of ckpt-<step>.pt files or of complete step-<step>/ DCP folders")
    return steps[0][1]


def load(path: Path, *, trust: bool) -> Any:
    """The object saved at ``path`` (see :func:`resolve`), on the CPU; BadInput when it does not load."""
    target = resolve(path)
    if target.is_dir():
        return _load_dcp(target, trust=trust)
    try:
        return torch.load(target, map_location="cpu", weights_only=not trust)
    except Exception as exc:  # noqa: BLE001 - any failure to load is bad input, said with its cause
        if not trust and "weights only load failed" in str(exc).lower():
            raise BadInput(f"{target}: it pickles more than tensors and plain values, so a weights-only load "
                           "refused it; --trust loads it (runs its pickle: only for a file you trust)") from None
        raise BadInput(f"{target}: not a loadable checkpoint: {type(exc).__name__}: {_first_line(exc)}") from None


def _load_dcp(folder: Path, *, trust: bool) -> Any:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    with tempfile.TemporaryDirectory(prefix="compare-state-") as tmp:
        merged = Path(tmp) / "merged.pt"
        try:
            dcp_to_torch_save(str(folder), str(merged))
            return torch.load(merged, map_location="cpu", weights_only=not trust)
        except Exception as exc:  # noqa: BLE001 - a broken DCP folder is bad input
            raise BadInput(f"{folder}: a torch.distributed.checkpoint folder that does not load: "
                           f"{type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


def _step(state: Any) -> int | None:
    if isinstance(state, dict):
        for key in ("step", "global_step", "iteration"):
            v = state.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def compare(a: Path, b: Path, *, tolerance: float = 0.0, trust: bool = False) -> dict[str, Any]:
    """The comparison of checkpoints ``a`` and ``b`` as the JSON object the command prints."""
    sa, sb = load(a, trust=trust), load(b, trust=trust)
    w = Walk(tolerance)
    w.walk(sa, sb)
    w.attribute_lr()
    ranked = sorted(w.found, key=lambda d: CLASS_ORDER.index(d.state))   # stable: walk order within a class
    classes: dict[str, int] = {}
    for d in w.found:
        classes[d.state] = classes.get(d.state, 0) + 1
    return {"equal": not w.found, "a": str(resolve(a)), "b": str(resolve(b)), "tolerance": tolerance,
            "comparison": "bitwise" if tolerance == 0 else "within-tolerance", "compared": w.compared,
            "differing": len(w.found), "step": {"a": _step(sa), "b": _step(sb)}, "classes": classes,
            "first": ranked[0].to_json() if ranked else None,
            "divergences": [d.to_json() for d in ranked[:MAX_LISTED]],
            # over every differing value, not only those listed: the spread a tolerance must cover
            "max_abs_diff": max((d.max_abs_diff for d in w.found if d.floating and d.max_abs_diff is not None),
                                default=None),
            "not_numeric": sum(1 for d in w.found if not d.floating)}


def _tolerance(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"{text}: a tolerance is a finite number >= 0")
    return v


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m elastic_chaos.trainer.compare_state", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", type=Path, help="checkpoint A (the reference: a run without the fault)")
    p.add_argument("b", type=Path, help="checkpoint B (the run to judge)")
    p.add_argument("--tolerance", type=_tolerance, default=0.0, help="largest absolute difference allowed "
                   "per floating value (default 0: bitwise)")
    p.add_argument("--trust", action="store_true", help="load with weights_only=False (runs the files' pickles)")
    args = p.parse_args(argv)
    try:
        out = compare(args.a, args.b, tolerance=args.tolerance, trust=args.trust)
    except BadInput as exc:
        print(json.dumps({"error": str(exc)}))
        return EXIT_BAD_INPUT
    print(json.dumps(out))
    return EXIT_EQUAL if out["equal"] else EXIT_DIVERGED


if __name__ == "__main__":
    sys.exit(main())
