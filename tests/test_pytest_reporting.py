"""The plugin's reporting: metrics as JUnit XML properties, and a failed scenario's
message carrying its report folder and the timeline slice around the fault.

Runs a real 2-node elastic job (torchrun agents, etcd-v2 rendezvous) of a
stand-in training script that reports steps without torch, in a pytester
session.
"""
from __future__ import annotations

import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

STEPPER = textwrap.dedent('''
    # A stand-in training script: reports steps in elastic_chaos.trainer.progress's format without torch.
    import json, os, time
    for step in range(1, 10_000):
        print("ELASTIC_CHAOS " + json.dumps({"ev": "step", "t": time.time(), "step": step,
              "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
              "pid": os.getpid()}), flush=True)
        time.sleep(0.05)
''')


@pytest.mark.slow
def test_a_failed_scenario_reports_its_folder_timeline_slice_and_metrics(pytester):
    script = pytester.path / "stepper.py"
    script.write_text(STEPPER)
    pytester.makepyfile(textwrap.dedent(f"""
        from elastic_chaos.faults import KillNode

        def test_hypothesis_breaks(start_job):
            job = start_job(nodes="1:2", script=[{str(script)!r}], replace_lost_nodes=False)
            job.wait_for_step(5, timeout=90)
            job.inject(KillNode())
            assert False, "the hypothesis did not hold"
    """))
    reports, junit = pytester.path / "out", pytester.path / "junit.xml"
    result = pytester.runpytest("--chaos-reports", str(reports), f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    (folder,) = reports.iterdir()
    result.stdout.fnmatch_lines([
        "*- elastic-chaos -*",
        f"report folder: {folder}*",
        "kill-node on node-1: detect*",
        "timeline (seconds since the run started) around the fault(s):",
        "*progress*step event(s): step *",
        "*fault*planned*node-1*fault=kill-node*",
        "*node*lost*node-1*",
    ])
    result.stdout.fnmatch_lines(["*fault*injected*node-1*fault=kill-node*"])
    (case,) = ET.parse(junit).getroot().iter("testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["chaos.verdict"] == "failed"
    assert props["chaos.report"] == str(folder / "report.html")
    assert props["chaos.fault0.kind"] == "kill-node" and props["chaos.fault0.target"] == "node-1"
    assert int(props["chaos.fault0.world_size_before"]) == 2
    assert "fault=kill-node" in case.find("failure").text       # the slice is in the JUnit failure too
    assert (folder / "report.html").exists() and (folder / "summary.md").exists()


RUNS = Path(__file__).parent / "fixtures" / "runs"


def test_metric_properties_of_a_recorded_run():
    import json

    from elastic_chaos.reporting.load import read_result
    from elastic_chaos.reporting.views.failure import metric_properties
    report = json.loads((RUNS / "kill-node-shrink" / "report.json").read_text())
    props = dict(metric_properties(read_result(RUNS / "kill-node-shrink"), None))
    m = report["faults"][0]["metrics"]
    assert props["chaos.verdict"] == "passed" and "chaos.report" not in props
    assert props["chaos.fault0.regain_s"] == str(m["regain_s"])
    assert props["chaos.fault0.phase.rendezvous_s"] == str(m["phases"]["rendezvous"])
    assert props["chaos.fault0.lost_steps"] == "10" and "chaos.fault0.replacement_s" not in props  # null: left out


def test_the_timeline_slice_starts_just_before_the_fault_and_folds_steps():
    from elastic_chaos.reporting.load import load_run
    from elastic_chaos.reporting.views.failure import timeline_slice
    run = load_run(RUNS / "kill-node-shrink")
    fault = run.faults[0].injected_at
    text = timeline_slice(run.events, [fault], run.t0, max_lines=200)
    first = float(text.splitlines()[0].split()[0].strip("+s"))
    assert fault - run.t0 - 3.0 <= first <= fault - run.t0
    assert "step event(s): step 41 .." in text                  # resumed from the checkpoint at 40
    assert not [line for line in text.splitlines() if line.split()[1:3] == ["progress", "step"]]  # all folded
    assert [line for line in text.splitlines() if line.split()[1:3] == ["rendezvous", "state"]]
    short = timeline_slice(run.events, [fault], run.t0, max_lines=10)
    assert len(short.splitlines()) == 11 and "event line(s) omitted" in short
