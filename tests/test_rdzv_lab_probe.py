"""python -m bench.rdzv.probe: one size of the rendezvous harness with the preset, arrivals and dilation the sweep
holds fixed."""
import json
import subprocess
import sys

import pytest

from bench.rdzv import probe
from bench.rdzv.records import SizeResult


@pytest.mark.parametrize("bad", [["--nodes", "1"], ["--nodes", "8", "--dilation", "0.5"],
                                 ["--nodes", "8", "--spread", "-1"], ["--nodes", "8", "--rdzv-preset", "slow"],
                                 ["--nodes", "8", "--real-minutes", "0"], []])
def test_bad_input_is_a_usage_error(bad):
    out = subprocess.run([sys.executable, "-m", "bench.rdzv.probe", *bad], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "error:" in out.stderr and "Traceback" not in out.stderr


def test_the_summary_says_a_formation_that_did_not_complete():
    form = {"label": "formation", "seconds": None, "rounds": 0, "store_ops": 1000, "store_bytes": 5e6,
            "store_cpu_s": 1.5, "store_throttled_s": 30.0, "busy": 0.2, "saturated_s": 0.0, "declared_dead": 7}
    size = SizeResult.from_json({"broke": "formation: 8 node(s) had not formed", "episodes": [form], "steady": None})
    lines = probe.summary(size, "/tmp/probe")
    assert lines[0] == "formation DID NOT COMPLETE: formation: 8 node(s) had not formed"
    assert "1,000 operations" in lines[1] and "declared dead 7" in lines[1]


@pytest.mark.slow
def test_a_small_probe_with_staggered_arrivals_and_torchs_defaults_forms_and_writes_its_json(tmp_path):
    # real torch handlers over a real TCPStore, 6 nodes arriving over 2 s: torch's defaults complete the round
    # when the last arrives (max_nodes), without waiting out the 30 s last call
    out = subprocess.run([sys.executable, "-m", "bench.rdzv.probe", "--nodes", "6", "--rdzv-preset", "default",
                          "--spread", "2", "--steady", "2", "--real-minutes", "3", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout + out.stderr
    size = json.loads((tmp_path / "probe.json").read_text())
    (form,) = size["episodes"]
    assert form["label"] == "formation" and form["seconds"] is not None and form["seconds"] < 20
    assert size["preset"] == "default" and size["spread_s"] == 2.0 and "--spread 2" in size["command"]
    assert "formation " in out.stdout and "steady state:" in out.stdout
