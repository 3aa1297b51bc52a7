"""``elastic-chaos scale`` prints each quantity once: where the c10d store model covers a quantity that the
measured figures would only extrapolate (the store's steady load, formation), the model's figure stands alone,
labelled as the model (elastic_chaos/scale/modelled.py); where the harness measured, its figure stays and the
model is one line beside it, named as a different quantity (collision-free, not with lost races)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from elastic_chaos.scale.expect import traffic
from elastic_chaos.scale.figures import load as load_figures
from elastic_chaos.scale.modelled import steady
from elastic_chaos.scale.store_costs import load as load_costs
from elastic_chaos.scale.store_model import Protocol, load

UNITS = {"k": 1e3, "M": 1e6, "G": 1e9, "": 1.0}
HOSTED = ("the model hosted as the harness", "measured in the harness")
"""Formation hosted as the harness was (time dilation): another quantity than a job's formation."""


def scale(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "scale", *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _value(text: str) -> float:
    m = re.fullmatch(r"([\d.,]+)([kMG]?)", text)
    assert m, text
    return float(m.group(1).replace(",", "")) * UNITS[m.group(2)]


def figures(stdout: str) -> dict[str, set[float]]:
    """Every figure printed for the store's steady operations/s, payload bytes/s and CPU, and for formation
    (rounded to the two significant figures the rows are printed with), whatever the line calls it."""
    found: dict[str, set[float]] = {"ops/s": set(), "bytes/s": set(), "cores": set(), "formation s": set()}

    def add(key: str, v: float) -> None:
        found[key].add(float(f"{v:.2g}"))

    for line in stdout.splitlines():
        row = re.match(r"  (store operations per second|store payload bytes per second|store CPU \(cores\))"
                       r"[^\d]*?\s{2,}([\d.,]+[kMG]?)\s", line)
        if row:
            add({"store o": "ops/s", "store p": "bytes/s", "store C": "cores"}[row.group(1)[:7]], _value(row.group(2)))
        for v in re.findall(r"([\d,]+) ops/s", line):
            add("ops/s", _value(v))
        for v in re.findall(r"([\d,.]+) MB/s", line):
            add("bytes/s", _value(v) * 1e6)
        for v in re.findall(r"([\d.]+) of one store core", line):
            add("cores", float(v))
        form = re.match(r"  formation[^:]*?\s{2,}([\d.]+) s(?:\s|$)", line)
        if form and not any(other in line for other in HOSTED):
            add("formation s", float(form.group(1)))
    return found


@pytest.mark.parametrize("args", [("--nodes", "2048"), ("--nodes", "800"), ("--nodes", "4096", "--rdzv-preset", "fast"),
                                  ("--nodes", "1024")])
def test_beyond_the_largest_size_measured_each_store_figure_is_printed_once(args):
    found = figures(scale(*args, "--rdzv-backend", "c10d"))
    assert all(len(values) <= 1 for values in found.values()), found
    assert found["ops/s"] and found["bytes/s"] and found["cores"]


def test_beyond_the_largest_size_measured_the_steady_load_is_the_models_and_says_so():
    out = scale("--nodes", "2048", "--rdzv-backend", "c10d")
    rows = [line for line in out.splitlines() if line.startswith("  store ") and "per second" in line
            or "store CPU (cores)" in line]
    assert len(rows) == 3 and all("collision-free (MODEL)" in r and "MODEL (below)" in r for r in rows)
    assert "EXTRAPOLATED" not in "".join(rows)
    assert "2.5k" in rows[0] and "630.8M" in rows[1]   # the model's: 2,458 ops/s, 631 MB/s (bench/RESULTS.md)


def test_at_a_measured_size_the_measured_load_stays_and_the_model_is_one_line_with_its_error():
    out = scale("--nodes", "512", "--rdzv-backend", "c10d", "--rdzv-preset", "fast")
    rows = [line for line in out.splitlines() if "measured with lost races" in line]
    assert len(rows) == 3 and all("measured at 512 nodes" in r for r in rows)
    model = [line for line in out.splitlines() if "collision-free (MODEL)" in line]
    assert len(model) == 1 and "against the measured: -25%" in model[0]


def test_the_model_line_names_another_preset_than_the_harness_ran_and_gives_no_error_against_it():
    figs, costs = load_figures(), load_costs()
    m = load(512, costs, Protocol(5.0, 3))   # torch's defaults; the harness ran fast
    rows, line = steady(figs, "c10d", traffic(figs, "c10d", 512), m, same_settings=False)
    assert [what for what, _, _ in rows] == ["store operations per second, measured with lost races",
                                            "store payload bytes per second, measured with lost races",
                                            "store CPU (cores), measured with lost races"]
    assert all("with preset fast" in how for _, _, how in rows)
    assert "614 ops/s" in line and "against" not in line
