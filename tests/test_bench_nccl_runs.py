"""bench/nccl_runs.py: single runs on NCCL brought back from a lent device, read from their report.json."""
from __future__ import annotations

import json

import pytest

from bench import nccl_runs

REPORT = {"scenario": "freeze", "job": {"backend": "nccl", "pg_timeout_s": 10.0}, "goodput": 0.19,
          "verdict": {"passed": True}, "started_at": 100.0, "finished_at": 142.2,
          "faults": [{"kind": "freeze", "target": "node-1",
                      "metrics": {"phases": {"detect": 4.2, "exit": 10.0, "shutdown": None, "rendezvous": 1.3,
                                             "restart": 6.8, "retrain": 1.2, "stall": None},
                                  "regain_s": 23.4, "lost_steps": 13, "world_size_before": 2,
                                  "world_size_final": 1}}]}


def test_a_run_row_is_what_its_report_measured(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"recovery": {}, "skipped": {}}))
    (tmp_path / "freeze.json").write_text(json.dumps(REPORT))
    assert nccl_runs.main(["--device", "1 x GPU", "--out", str(tmp_path), f"freeze30={tmp_path / 'freeze.json'}",
                          "--note", "one note"]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    (row,) = results["gpu_runs"]["runs"]
    assert row["run_s"] == 42.2 and row["faults"][0]["phases"]["exit"] == 10.0 and row["passed"] is True
    md = (tmp_path / "RESULTS.md").read_text()
    assert "| freeze30 (freeze) | PASSED | 42.2 | 4.2 | 10.0 | n/a | 1.3 | 6.8 | 1.2 | n/a | 23.4 | 13 | 2 -> 1 |" in md
    assert "- one note" in md


def test_a_file_that_is_no_report_is_refused_with_its_name(tmp_path, capsys):
    (tmp_path / "results.json").write_text("{}")
    (tmp_path / "bad.json").write_text("not json")
    with pytest.raises(SystemExit) as exc:
        nccl_runs.main(["--device", "x", "--out", str(tmp_path), f"a={tmp_path / 'bad.json'}"])
    assert exc.value.code == 2
    assert "bad.json: cannot read a report.json" in capsys.readouterr().err
