"""The one writer of bench/RESULTS.md: every section, in order, rendered from results.json.

Each section is a function of results.json in its own module here (the recovery cases, GPUs, the replayed
trace, the soak, checkpoint storage, the network, sharded saves, the local nodes, the rendezvous at scale,
another machine's figures, the toolkit's own checks); :func:`write_markdown` puts them together. Renderers
compute no figure: what they show was measured, or derived by the bench before (bench/results_file.py). The
plots are bench/render/plots.py.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Plots:
    """The pictures beside RESULTS.md, by file name (None: none drawn)."""

    recovery: str | None = None
    rdzv: str | None = None


def sections() -> tuple[Callable[[dict[str, Any], Plots], list[str]], ...]:
    """RESULTS.md's sections, in order."""
    from bench.render import (
        checks,
        dcp,
        gpu,
        network,
        nodes,
        other_cores,
        rdzv,
        recovery,
        replay,
        soak,
        storage,
        store_model,
    )

    return (recovery.markdown, gpu.markdown, replay.markdown, soak.markdown, storage.markdown, network.markdown,
            dcp.markdown, nodes.markdown,
            rdzv.results_markdown, store_model.markdown, other_cores.markdown, checks.markdown)


def write_markdown(results: dict[str, Any], path: Path, plots: Plots = Plots()) -> None:
    """RESULTS.md from ``results`` (``plots``: the pictures to show)."""
    lines: list[str] = []
    for section in sections():
        lines += section(results, plots)
    path.write_text("\n".join(lines) + "\n")
