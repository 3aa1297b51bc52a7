"""bench/other_cores.py: another machine's scale sizes and spot-ratio runs, kept apart from this VM's figures."""
from __future__ import annotations

import json

import pytest

from bench import other_cores


def _phase(v):
    return {"median": v, "min": v, "max": v, "n": 1}


def _case(recovery, ratio, rendezvous):
    return {"recovery_s": _phase(recovery), "ratio_to_floor": ratio, "rendezvous": _phase(rendezvous),
            "detect": _phase(0.5), "restart": _phase(7.0)}


SPOT = {"floor_s": {"median": 7.0}, "reps": 1, "machine": "vm (x86_64, 16 cores)", "date": "2026-11-26",
        "recovery": {"etcd-v2/fast/spot-interruption": _case(12.2, 1.74, 5.3),
                     "etcd-v2/fast/spot-interruption+leave": _case(9.0, 1.29, 1.3)}}
SIZE = {"backend": "c10d", "nodes": 512, "processes": 16, "steady": None, "load_before": 7.1,
        "broke": "formation: 512 node(s) had not formed", "episodes": [
            {"label": "formation", "seconds": None, "limited": True}]}


def test_the_lent_machines_runs_get_their_own_section_and_leave_this_machines_figures_alone(tmp_path):
    before = {"recovery": {"c10d/fast/kill-node": {"ratio_to_floor": 3.0}}, "skipped": {}}
    (tmp_path / "results.json").write_text(json.dumps(before))
    (tmp_path / "spot.json").write_text(json.dumps(SPOT))
    (tmp_path / "rdzv.json").write_text(json.dumps({"cores": 16, "size": SIZE}))
    assert other_cores.main(["--device", "16 cores", "--out", str(tmp_path), "--scale", str(tmp_path / "rdzv.json"),
                             "--spot", str(tmp_path / "spot.json"), "--note", "why 512 broke"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    measured = {k: {f: v for f, v in c.items() if f != "limit"} for k, c in results["recovery"].items()}
    assert measured == before["recovery"]  # nothing of the lent machine mixed in (`limit`: derived, bench/limits.py)
    (run,) = results["device_runs"]["spot"]
    assert run["floor_s"] == 7.0 and run["cases"]["etcd-v2/fast/spot-interruption/with"]["ratio"] == 1.29
    md = (tmp_path / "RESULTS.md").read_text()
    section = md[md.index("## On a lent 16-core machine"):]
    assert "| 1 | 7.0 | 12.2 s = 1.74x (rendezvous 5.3 s) | 9.0 s = 1.29x (rendezvous 1.3 s) |" in section
    assert "| 512 | 1 | FAILED |" in section and "broke: formation" in section and "- why 512 broke" in section


def test_nothing_to_record_or_an_unreadable_file_is_refused(tmp_path, capsys):
    (tmp_path / "results.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        other_cores.main(["--device", "x", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "nothing to record" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit) as exc:
        other_cores.main(["--device", "x", "--out", str(tmp_path), "--scale", str(tmp_path / "bad.json")])
    assert exc.value.code == 2 and "cannot read a device result" in capsys.readouterr().err


@pytest.mark.parametrize("sizes", ["abc", "1", ""])
def test_the_device_sweep_refuses_sizes_it_cannot_run(tmp_path, capsys, sizes):
    from bench.rdzv import sizes as lab_sizes

    with pytest.raises(SystemExit) as exc:
        lab_sizes.main(["--sizes", sizes, "--json-dir", str(tmp_path / "out")])
    assert exc.value.code == 2 and "--sizes" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
