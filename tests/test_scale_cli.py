"""``elastic-chaos scale``: what a job of N nodes should expect, from figures written here (synthetic,
in the shape the bench writes: no harness runs), and its refusals; and the figures the toolkit ships."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from bench.rdzv import shipped
from bench.rdzv.records import SizeResult
from elastic_chaos.scale.expect import estimate, expect, knobs
from elastic_chaos.scale.figures import SHIPPED, BackendFigures, Figures, load, save
from elastic_chaos.spec import JobSpec, RendezvousSpec, preset

SIZES = [8, 16, 32, 64, 128, 256, 512, 1024]
FAST = {"keep_alive_interval": 1, "keep_alive_max_attempt": 4, "last_call_timeout": 1, "join_timeout": 600}


def backend_figures(backend: str, sizes: list[dict]) -> BackendFigures:
    """The lab's figures (bench/rdzv/shipped.py) from sizes as results.json keeps them."""
    return shipped.backend_figures(backend, [SizeResult.from_json(s) for s in sizes])


def size(n: int, *, busy: float = 0.1, broke: str | None = None) -> dict:
    """A size's result as bench.rdzv.records.SizeResult.to_json() writes it; formation 1 + N/100 s,
    re-formation after a hard loss 5 + N/1000 s, after a leave 2 + N/1000 s."""
    def ep(label: str, seconds: float) -> dict:
        return {"label": label, "seconds": round(seconds, 3), "limited": busy > 0.8}
    return {"nodes": n, "broke": broke, "load_before": 0.5,
            "episodes": [ep("formation", 1 + n / 100), ep("hard 1", 5 + n / 1000), ep("leave 1", 2 + n / 1000),
                         ep("join after hard 1", 1.5 + n / 500), ep("sigterm 1", 5 + n / 1000)],
            "steady": {"ops_per_s": {"state_get": float(n)}, "bytes_per_s": 60.0 * n * n, "store_cpu": n / 2000,
                       "agent_cpu": 0.001, "limited": busy > 0.8}}


@pytest.fixture
def figures_path(tmp_path: Path) -> Path:
    sizes = [size(n) for n in SIZES[:-1]] + [size(1024, busy=0.95)]
    figs = Figures("2026-11-25", "testbox", 2, "2.13.0", "fast", FAST,
                   {"c10d": backend_figures("c10d", sizes), "etcd-v2": backend_figures("etcd-v2", sizes[:4])})
    return save(figs, tmp_path / "measured.json")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "scale", *args], capture_output=True,
                          text=True,
                          timeout=120)


def test_a_measured_size_prints_the_measured_figures(figures_path):
    out = cli("--nodes", "512", "--rdzv-backend", "c10d", "--rdzv-preset", "fast", "--figures", str(figures_path))
    assert out.returncode == 0, out.stderr
    assert "A 512-node job, rendezvous c10d, preset fast: keep-alive 1 s x 4" in out.stdout
    assert "last call 1 s, join timeout 600 s" in out.stdout
    formation = next(line for line in out.stdout.splitlines() if line.strip().startswith("formation"))
    assert "6.1 s" in formation and "measured at 512 nodes" in formation
    assert "5.5 s" in next(line for line in out.stdout.splitlines() if "1 node lost" in line)
    assert "2.5 s" in next(line for line in out.stdout.splitlines() if "1 node left" in line)


def test_beyond_the_largest_size_the_figure_is_extrapolated_and_says_so(figures_path):
    out = cli("--nodes", "4096", "--rdzv-backend", "etcd-v2", "--rdzv-preset", "fast", "--figures", str(figures_path))
    assert out.returncode == 0, out.stderr
    formation = next(line for line in out.stdout.splitlines() if line.strip().startswith("formation"))
    assert "EXTRAPOLATED beyond the largest size measured (64)" in formation
    assert "42.0 s" in formation  # 1 + 4096/100: the straight line the points lie on


def test_another_presets_timeouts_replace_the_measured_ones(figures_path):
    figs = load(figures_path)
    hard = next(line for line in expect(figs, "c10d", 512, RendezvousSpec()) if "lost" in line.what)
    # torch's defaults: keep-alive 5 s x 3 and last call 30 s, plus the work measured beyond fast's 4 + 1 s
    assert hard.seconds == pytest.approx(15 + 30 + (5 + 512 / 1000 - 5))
    assert "keep-alive expiry 15 s + last call 30 s" in hard.how


def test_a_size_between_two_measured_is_interpolated(figures_path):
    value, how = estimate(load(figures_path).backend("c10d"), "formation_s", 384)
    assert value == pytest.approx(1 + 384 / 100)
    assert how == "interpolated between the 256- and 512-node measurements"


def test_a_figure_this_machine_limited_says_so(figures_path):
    _, how = estimate(load(figures_path).backend("c10d"), "formation_s", 1024)
    assert how == "measured at 1024 nodes (this machine was the limit)"


def test_without_nodes_it_is_a_usage_error(figures_path):
    out = cli("--rdzv-backend", "c10d", "--figures", str(figures_path))
    assert out.returncode == 2 and "--nodes N" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("bad", ["0", "-3", "1.5", "many"])
def test_a_bad_node_count_is_a_usage_error(bad, figures_path):
    out = cli("--nodes", bad, "--figures", str(figures_path))
    assert out.returncode == 2 and "--nodes" in out.stderr and "Traceback" not in out.stderr


def test_a_backend_without_figures_is_a_usage_error_that_says_how_to_measure(tmp_path, figures_path):
    raw = json.loads(figures_path.read_text())
    del raw["backends"]["c10d"]
    only_etcd = tmp_path / "etcd-only.json"
    only_etcd.write_text(json.dumps(raw))
    out = cli("--nodes", "64", "--rdzv-backend", "c10d", "--figures", str(only_etcd))
    assert out.returncode == 2 and "no measured figures for rendezvous backend 'c10d'" in out.stderr
    assert "python -m bench --scale-rdzv" in out.stderr


def test_missing_or_broken_figures_are_a_usage_error(tmp_path):
    out = cli("--nodes", "64", "--figures", str(tmp_path / "none.json"))
    assert out.returncode == 2 and "python -m bench --scale-rdzv" in out.stderr
    (tmp_path / "bad.json").write_text("{")
    out = cli("--nodes", "64", "--figures", str(tmp_path / "bad.json"))
    assert out.returncode == 2 and "cannot read the measured figures" in out.stderr


def test_help_shows_an_example():
    out = cli("--help")
    assert out.returncode == 0
    assert "elastic-chaos scale --nodes 512 --rdzv-backend c10d --rdzv-preset fast" in out.stdout


def test_the_shipped_figures_load_and_answer_for_both_backends():
    figs = load(SHIPPED)
    for backend in ("etcd-v2", "c10d"):
        lines = expect(figs, backend, 512, preset("fast").apply(JobSpec()).rdzv)
        assert all(line.seconds is not None and math.isfinite(line.seconds) for line in lines)
    assert knobs(RendezvousSpec())["last_call_timeout"] == 30


def test_a_model_that_falls_with_size_is_not_extrapolated_below_the_largest_measurement(tmp_path):
    # leave 1 measured 3.10 s at 8 and 3.06 s at 16 (limited above): a falling line is noise, not a trend
    sizes = [size(8), size(16), size(32, busy=0.95)]
    sizes[0]["episodes"][2]["seconds"], sizes[1]["episodes"][2]["seconds"] = 3.10, 3.06
    sizes[2]["episodes"][2]["seconds"] = 3.2
    figs = Figures("2026-11-26", "testbox", 2, "2.13.0", "fast", FAST, {"c10d": backend_figures("c10d", sizes)})
    value, how = estimate(load(save(figs, tmp_path / "m.json")).backend("c10d"), "reform_leave_s", 512)
    assert value == pytest.approx(3.06) and how.startswith("AT LEAST as measured at 16 nodes")


def test_at_and_past_the_size_the_harness_broke_at_nothing_is_extrapolated_past_the_break(tmp_path):
    # etcd-v2 has no store model: the measured figures alone answer (c10d's formation there is the model's, below)
    broken = {**size(1024), "broke": "formation: 1024 node(s) had not formed ...", "steady": None,
              "episodes": [{"label": "formation", "seconds": None, "limited": False}]}
    sizes = [size(n) for n in SIZES[:-1]] + [broken]
    figs = Figures("2026-11-27", "testbox", 2, "2.13.0", "fast", FAST,
                   {"c10d": backend_figures("c10d", sizes), "etcd-v2": backend_figures("etcd-v2", sizes)})
    path = save(figs, tmp_path / "measured.json")
    out = cli("--nodes", "2048", "--rdzv-backend", "etcd-v2", "--rdzv-preset", "fast", "--figures", str(path))
    assert out.returncode == 0, out.stderr
    formation = next(line for line in out.stdout.splitlines() if line.strip().startswith("formation"))
    assert "DID NOT COMPLETE in the harness at 1024 nodes" in formation and " - " in formation
    hard = next(line for line in out.stdout.splitlines() if "1 node lost" in line)
    assert "EXTRAPOLATED" in hard and "the harness broke at 1024 nodes" in hard
    assert "The harness broke at 1024 nodes (at or below this size) with preset fast: formation: 1024" in out.stdout
    assert "not measured there" not in out.stdout  # the job's settings are the ones the break was measured with
    # torch's defaults: a 15 s keep-alive expiry, not the 4 s the break was measured with -- said, not implied
    other = cli("--nodes", "1024", "--rdzv-backend", "etcd-v2", "--rdzv-preset", "default", "--figures", str(path))
    formation = next(line for line in other.stdout.splitlines() if line.strip().startswith("formation"))
    assert ("DID NOT COMPLETE in the harness at 1024 nodes with preset fast (keep-alive expiry 4 s, last call 1 s); "
            "this job's settings were not measured there") in formation
    below = cli("--nodes", "512", "--rdzv-backend", "etcd-v2", "--rdzv-preset", "fast", "--figures", str(path))
    assert "DID NOT COMPLETE" not in below.stdout and "measured at 512 nodes" in below.stdout
    # c10d: past the largest size measured, formation is the store model's, which keeps the harness' break
    c10d = cli("--nodes", "2048", "--rdzv-backend", "c10d", "--rdzv-preset", "fast", "--figures", str(path))
    formation = next(line for line in c10d.stdout.splitlines() if line.strip().startswith("formation"))
    assert "MODEL (below)" in formation and "did not complete one at 1024 nodes with preset fast" in formation
    assert "EXTRAPOLATED" not in formation


def test_a_reader_that_closed_the_pipe_stops_the_command_quietly():
    # `elastic-chaos scale ... | head`: the pipe closes before everything is written; a shell's 141, no traceback
    import os

    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write: every write fails, whatever the buffering
    try:
        out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "scale", "--nodes", "512"],
                             stdout=w, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(w)
    assert out.returncode == 141, out.stderr
    assert not any(word in out.stderr for word in ("Traceback", "internal error", "Exception ignored"))
