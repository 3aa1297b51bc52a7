"""A report folder is input like any other (issue 15, findings 5 and 6): report.html runs
nothing a folder says and links only inside it; a report.json field of the wrong type is
named, never a traceback; outputs that cannot be written are a usage error; every JSON
the toolkit writes is strict JSON."""
from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elastic_chaos.errors import SpecError
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.schema import dumps

FIXTURES = Path(__file__).parent / "fixtures" / "runs"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def copy_run(tmp_path: Path, name: str = "kill-node-shrink") -> Path:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    return folder


def edit_report(folder: Path, change) -> None:
    report = json.loads((folder / "report.json").read_text())
    change(report)
    (folder / "report.json").write_text(json.dumps(report))


# -- finding 6: report.html runs what a report folder says ----------------------------

def test_a_node_log_entry_is_never_a_script_link(tmp_path):
    folder = copy_run(tmp_path)
    (folder / "javascript:alert(1)").write_text("a file a crafted folder holds\n")
    edit_report(folder, lambda r: r["node_logs"].update({"evil": "javascript:alert(1)", "far": "/etc/hostname"}))
    html = (render_folder(folder, png=False).html).read_text()
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs and all(h.startswith("./") for h in hrefs), hrefs
    assert './javascript%3Aalert%281%29' in hrefs          # a file inside the folder, as a path
    assert "/etc/hostname" not in " ".join(hrefs) and "far log (outside the report folder" in html


def test_the_page_allows_only_its_own_script():
    from elastic_chaos.reporting.views.html import CSP, SCRIPT
    script_src = re.search(r"script-src ([^;]*)", CSP).group(1)
    assert "unsafe-inline" not in script_src
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    assert script_src == f"'sha256-{digest}'"


def test_report_data_is_escaped(tmp_path):
    folder = copy_run(tmp_path)
    edit_report(folder, lambda r: r["verdict"]["reasons"].append('<script>alert("x")</script>'))
    html = render_folder(folder, png=False).html.read_text()
    assert '<script>alert("x")</script>' not in html and "&lt;script&gt;" in html


# -- finding 5: bad report.json, unwritable outputs, strict JSON -----------------------

@pytest.mark.parametrize("change,field", [
    (lambda r: r.update(faults=5), "faults"),
    (lambda r: r.update(verdict="yes"), "verdict"),
    (lambda r: r["faults"][0].update(injected_at="yesterday"), "faults[0].injected_at"),
    (lambda r: r["faults"][0]["metrics"].update(regain_s="fast"), "faults[0].metrics.regain_s"),
    (lambda r: r["faults"][0]["metrics"]["phases"].update(detect=[1]), "faults[0].metrics.phases.detect"),
    (lambda r: r.update(goodput=float("inf")), "goodput"),
])
def test_report_on_a_wrong_typed_field_names_it_and_exits_2(tmp_path, change, field):
    folder = copy_run(tmp_path)
    edit_report(folder, change)
    out = cli("report", str(folder))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"report.json: {field}" in out.stderr


def test_audit_names_the_wrong_field_too(tmp_path):
    folder = copy_run(tmp_path)
    edit_report(folder, lambda r: r["faults"][0]["metrics"].update(lost_steps="many"))
    out = cli("audit", str(tmp_path), "--html", str(tmp_path / "audit.html"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "faults[0].metrics.lost_steps" in out.stderr


def test_an_audit_that_cannot_be_written_is_a_usage_error(tmp_path):
    copy_run(tmp_path)
    (tmp_path / "blocked").write_text("a file, not a folder")
    out = cli("audit", str(tmp_path), "--html", str(tmp_path / "blocked" / "audit.html"))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "cannot write the audit" in out.stderr


def test_a_folder_whose_report_cannot_be_written_is_a_usage_error(tmp_path):
    folder = copy_run(tmp_path)
    (folder / "report.html").mkdir()          # report.html cannot be replaced by a file
    out = cli("report", str(folder), "--no-png")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "cannot write report.html" in out.stderr


def _strict(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_json_outputs_never_hold_nan_or_infinity(tmp_path):
    assert _strict(dumps({"a": float("inf"), "b": [float("nan"), 1.5]})) == {"a": None, "b": [None, 1.5]}
    copy_run(tmp_path)
    out = cli("audit", str(tmp_path), "--html", str(tmp_path / "audit.html"))
    assert out.returncode in (0, 1), out.stderr
    _strict((tmp_path / "audit.json").read_text())


# -- the loader, fuzzed: only the documented error ------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.text(max_size=8),
                     st.floats(allow_nan=True, allow_infinity=True))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=8)
_metric_keys = st.sampled_from(["regain_s", "detect_s", "lost_steps", "world_size_before", "phases", "missing"])
_fault = st.fixed_dictionaries({}, optional={
    "kind": _json, "target": _json, "injected_at": _json,
    "metrics": st.one_of(_json, st.dictionaries(_metric_keys, _json, max_size=4))})
_report = st.fixed_dictionaries({}, optional={
    "schema_version": _json, "platform": _json, "scenario": _json, "job": _json, "goodput": _json,
    "verdict": st.one_of(_json, st.fixed_dictionaries({}, optional={"passed": _json, "reasons": _json,
                                                                    "checks": _json})),
    "faults": st.one_of(_json, st.lists(_fault, max_size=2)), "node_logs": _json,
    "started_at": _json, "finished_at": _json, "samples": _json, "split_brain": _json})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(report=st.one_of(_report, _json))
def test_any_report_json_renders_or_is_refused_with_a_spec_error(tmp_path, report):
    folder = tmp_path / "fuzz"
    if not folder.exists():
        shutil.copytree(FIXTURES / "kill-node-shrink", folder)
    (folder / "report.json").write_text(json.dumps(report))
    try:
        render_folder(folder, png=False)
    except SpecError:
        pass


_sources = st.sampled_from(["progress", "fault", "node", "agent", "rendezvous", "checkpoint", "runner", "x"])
_kinds = st.sampled_from(["step", "injected", "lost", "started", "state", "round_complete", "saved", "loaded",
                          "phase", "worker_failed", "workers_starting", "observed", "y"])
_event = st.fixed_dictionaries({"t": st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                               st.integers(-10**13, 10**13)),
                                "source": _sources, "kind": _kinds,
                                "node": st.one_of(st.none(), st.sampled_from(["node-0", "node-1"]), _json),
                                "data": st.one_of(_json, st.dictionaries(
                                    st.sampled_from(["step", "world_size", "rank", "pid", "fault", "phase",
                                                     "participants", "samples", "round"]), _json, max_size=4))})


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=12))
def test_any_timeline_renders_or_is_refused_with_a_spec_error(tmp_path, events):
    folder = tmp_path / "fuzz-timeline"
    folder.mkdir(exist_ok=True)
    (folder / "report.json").unlink(missing_ok=True)
    (folder / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events) + "{cut")
    try:
        render_folder(folder, png=False)
    except SpecError:
        pass
