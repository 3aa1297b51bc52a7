"""Rendering report folders recorded from real runs (tests/fixtures/runs/, see its README).

Every test copies a fixture to tmp_path first: rendering writes into the folder.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.events import Event, FaultEv, NodeEv
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.load import load_run

RUNS = Path(__file__).parent / "fixtures" / "runs"


@pytest.fixture
def copy_run(tmp_path):
    def copy(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(RUNS / name, dst)
        return dst
    return copy


def metrics(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())["faults"][0]["metrics"]


@pytest.mark.parametrize("name", ["kill-node-replaced", "kill-node-shrink", "kill-node-c10d"])
def test_a_finished_run_renders_verdict_table_and_timeline(copy_run, name):
    folder = copy_run(name)
    result = render_folder(folder, png=False)
    html = result.html.read_text()
    m = metrics(folder)
    assert 'class="verdict passed"' in html
    row = re.search(r'<table id="recovery">.*?</table>', html, re.S).group(0)
    for phase in ("detect", "rendezvous", "restart", "replay"):
        assert f"<td>{m['phases'][phase]:.1f}s</td>" in row
    assert f"<td>{m['regain_s']:.1f}s</td>" in row and f"<td>{m['lost_steps']}</td>" in row
    assert html.count('<polyline class="series"') >= 3      # 2 ranks before the fault, >= 1 after
    assert html.count('<g class="fault">') == 1
    assert html.count('<rect class="phase"') == 4            # the stacked phases of the one fault
    assert '<g class="round">' in html                        # rendezvous rounds (etcd or agent lines)
    assert 'class="world-size"' in html


def test_the_page_is_self_contained(copy_run):
    html = render_folder(copy_run("kill-node-replaced"), png=False).html.read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r'(src|href)="(https?:)?//', html), "no external resource"
    assert "<script src" not in html and "<link" not in html


def test_log_excerpts_show_the_survivor_noticing_the_fault(copy_run):
    html = render_folder(copy_run("kill-node-replaced"), png=False).html.read_text()
    excerpts = html[html.index("Logs around each fault"):]
    assert "Worker group FAILED" in excerpts                  # node-0's agent, right after the kill
    assert "trainer progress line(s) (steps" in excerpts      # step lines folded
    assert "node-1:" in excerpts and "node-2:" in excerpts    # target and replacement logs too


def test_keep_alive_expiry_is_named_with_its_cost(copy_run):
    result = render_folder(copy_run("kill-node-replaced"), png=False)
    (finding,) = [f for f in result.findings if f.setting and "keep_alive" in f.setting]
    m = metrics(result.run.folder)
    assert finding.phase == "rendezvous"
    assert 5.0 < finding.cost_s <= m["phases"]["rendezvous"] + 0.01   # within the measured phase
    assert "5 s x 3 = 15 s old (torch defaults)" in finding.text
    assert "due to expire at" in finding.text                          # from the recorded heartbeats
    assert "keep_alive_interval x keep_alive_max_attempt" in result.markdown.read_text()


def test_a_shrink_without_replacement_blames_last_call_timeout(copy_run):
    result = render_folder(copy_run("kill-node-shrink"), png=False)
    (finding,) = [f for f in result.findings if f.setting == "last_call_timeout"]
    assert 29.0 < finding.cost_s < 32.0                       # torch's default last call: 30 s
    assert "last_call_timeout=30 s (torch default)" in finding.text
    assert "no replacement joined" in finding.text


def test_a_replaced_node_has_no_last_call_finding(copy_run):
    result = render_folder(copy_run("kill-node-replaced"), png=False)
    assert not [f for f in result.findings if f.setting == "last_call_timeout"]


def test_c10d_says_the_rendezvous_is_not_observable(copy_run):
    result = render_folder(copy_run("kill-node-c10d"), png=False)
    assert any("c10d backend" in f.text for f in result.findings)
    assert not [f for f in result.findings if f.setting and "keep_alive" in f.setting]


def test_a_crashed_run_gets_a_report_that_says_what_is_missing(copy_run):
    folder = copy_run("crashed-mid-recovery")
    result = render_folder(folder, png=False)
    html = result.html.read_text()
    assert 'class="verdict unknown"' in html and "NO VERDICT" in html
    missing = html[html.index('id="missing"'):html.index("<h2>Recovery")]
    assert "no report.json" in missing
    assert "the last line of timeline.jsonl was cut off mid-write" in missing
    assert "without the &#x27;finished&#x27; phase (last phase: recovering)" in missing
    assert "no rendezvous round completed after the fault" in missing
    assert result.run.faults[0].recovery.detect_s is not None  # recomputed from the timeline
    assert "<td>kill-node</td>" in html and '<g class="fault">' in html
    assert not (folder / "report.json").exists()               # rendering never invents a report.json


def test_a_folder_without_timeline_renders_the_metrics_and_says_so(copy_run, tmp_path):
    folder = copy_run("kill-node-shrink")
    (folder / "timeline.jsonl").unlink()
    html = render_folder(folder, png=False).html.read_text()
    assert "no timeline.jsonl" in html and "No timeline: nothing to draw" in html
    assert "<td>kill-node</td>" in html


def test_garbage_lines_are_skipped_and_counted(copy_run):
    folder = copy_run("kill-node-shrink")
    with open(folder / "timeline.jsonl", "a") as f:
        f.write("not json\n{\"t\": \"soon\"}\n")
    run = load_run(folder)
    assert any("2 line(s) of timeline.jsonl could not be read" in m and "not JSON" in m
               and "t 'soon' is not a time" in m for m in run.missing)


def test_unknown_fault_and_event_kinds_are_drawn_generically(copy_run):
    folder = copy_run("kill-node-shrink")
    report = json.loads((folder / "report.json").read_text())
    report["faults"][0]["kind"] = "meteor-strike"
    (folder / "report.json").write_text(json.dumps(report))
    with open(folder / "timeline.jsonl", "a") as f:
        t = report["faults"][0]["injected_at"] + 20
        f.write(json.dumps(Event.make(FaultEv.REVERTED, t, "node-1",
                                      {"fault": "meteor-strike", "how": "the sky cleared"}).to_json()) + "\n")
        f.write(json.dumps({"t": t, "source": "telemetry", "kind": "gpu_ecc", "node": "node-0",
                            "data": {}}) + "\n")
    html = render_folder(folder, png=False).html.read_text()
    assert "meteor-strike → node-1" in html
    assert '<g class="fault-marker">' in html and "fault meteor-strike: reverted on node-1" in html


def test_not_a_report_folder_is_a_clear_error(tmp_path):
    with pytest.raises(SpecError, match="neither report.json nor timeline.jsonl"):
        render_folder(tmp_path)


def test_timeline_png_is_drawn_with_matplotlib(copy_run):
    pytest.importorskip("matplotlib", reason="the png extra is installed by `make install`")
    result = render_folder(copy_run("kill-node-shrink"))
    assert result.png is not None and result.png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.png.stat().st_size > 20_000                 # a picture, not an empty canvas
    assert "[timeline.png](timeline.png)" in result.markdown.read_text()


def test_without_matplotlib_the_png_is_skipped_with_a_note(copy_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)      # import matplotlib -> ImportError
    folder = copy_run("kill-node-shrink")
    result = render_folder(folder)
    assert result.png is None and not (folder / "timeline.png").exists()
    assert any("matplotlib is not installed" in n for n in result.notes)
    assert "matplotlib is not installed" in result.html.read_text()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120)


def test_report_command_exit_codes(copy_run, tmp_path):
    passed = cli("report", str(copy_run("kill-node-shrink")), "--no-png")
    assert passed.returncode == 0, passed.stderr
    assert "PASSED" in passed.stdout and "report.html" in passed.stdout
    crashed = cli("report", str(copy_run("crashed-mid-recovery")), "--no-png")
    assert crashed.returncode == 1 and "NO VERDICT" in crashed.stdout and "no report.json" in crashed.stdout
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = cli("report", str(empty))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "neither report.json nor timeline.jsonl" in bad.stderr


def test_a_passive_watch_recording_renders_its_observed_loss(copy_run):
    result = render_folder(copy_run("watched-kill-node"), png=False)
    (fault,) = result.run.faults
    assert fault.observed and fault.fault == "node-lost" and fault.target == "node-1"
    assert result.run.passed is True and result.run.platform == "etcd"
    html = result.html.read_text()
    assert "node-lost → node-1" in html and 'class="verdict passed"' in html
    (keep_alive,) = [f for f in result.findings if f.setting and "keep_alive" in f.setting]
    assert "due to expire" not in keep_alive.text            # the loss is timed at that very heartbeat


@pytest.mark.parametrize("command", ["report", "audit", "watch"])
def test_help_shows_an_example(command):
    out = cli(command, "--help")
    assert out.returncode == 0 and "example" in out.stdout


def test_a_long_series_is_thinned_keeping_its_ends():
    from elastic_chaos.reporting.views.svg import MAX_POINTS, thin
    points = [(float(i), i) for i in range(10 * MAX_POINTS + 7)]
    out = thin(points)
    assert len(out) <= MAX_POINTS + 1 and out[0] == points[0] and out[-1] == points[-1]
    assert thin(points[:10]) == points[:10]


def test_node_events_such_as_spot_notices_are_marked_on_the_node_lane(copy_run):
    folder = copy_run("kill-node-shrink")
    report = json.loads((folder / "report.json").read_text())
    with open(folder / "timeline.jsonl", "a") as f:
        f.write(json.dumps(Event.make(NodeEv.NOTICE, report["faults"][0]["injected_at"] - 5, "node-1",
                                      {"notice": "interruption"}).to_json()) + "\n")
    html = render_folder(folder, png=False).html.read_text()
    assert '<path class="node-mark"' in html and "node-1: notice (notice=interruption)" in html


def test_a_scripts_step_line_is_not_drawn_across_the_pause_of_its_restart():
    """A script's steps are one series per node: before and after a restart they were one polyline,
    a flat line across 20 s of no training (seen in a DDP-tutorial-shaped run's report)."""
    from elastic_chaos.reporting.views.svg import _split_at_pauses
    pts = [(1.0, 1), (2.0, 2), (3.0, 3), (25.0, 2), (26.0, 3)]
    assert _split_at_pauses(pts, [(3.0, 25.0)]) == [pts[:3], pts[3:]]
    assert _split_at_pauses(pts, []) == [pts]


def test_the_phase_bars_name_every_node_fit_long_labels_and_say_when_nothing_needed_recovering():
    from elastic_chaos.reporting.views.svg import phase_bars_svg
    long = "spot-interruption → chaos-2a7973d9-worker-0"
    svg = phase_bars_svg([("slow-storage → every node", {}), (long, {"detect": 12.8, "rendezvous": 40.9})])
    assert "no recovery: the job trained through it" in svg and "None" not in svg
    label = re.search(r'<text x="(\d+)"[^>]*text-anchor="end"[^>]*>' + re.escape(long), svg)
    assert label is not None and int(label.group(1)) >= 7 * len(long)      # the whole label fits left of the bars


def test_a_scripts_control_and_bidi_characters_are_shown_escaped_in_every_rendering():
    # before: raw ESC, BEL, backspace, NUL and U+202E from a script's output were copied into report.html
    from elastic_chaos.reporting.views.text import escape, visible
    said = "loss 0.3\x1b[2J\x07\x08\x00 \u202etxt.exe <b>"
    shown = visible(said)
    assert shown == "loss 0.3\\x1b[2J\\x07\\x08\\x00 \\u202etxt.exe <b>"
    assert not any(c in shown for c in "\x1b\x07\x08\x00\u202e")
    assert escape(said).endswith("\\u202etxt.exe &lt;b&gt;")
    assert visible("a\tb\nc") == "a\tb\nc"      # tabs and newlines stay


def test_a_scripts_control_characters_in_a_node_log_reach_no_rendering_raw(copy_run):
    folder = copy_run("kill-node-shrink")
    log = folder / "nodes" / "node-0.log"
    lines = log.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "Worker group FAILED" in line)
    # a worker's traceback line that a script printed with a terminal escape, a bell and a bidi override
    lines.insert(at, "[rank0]: RuntimeError: \x1b[2J\x07hidden\x08\x00 \u202egnp.exe")
    log.write_text("\n".join(lines) + "\n")
    render_folder(folder, png=False)
    page = (folder / "report.html").read_text()
    assert "\\x1b[2J\\x07hidden\\x08\\x00 \\u202egnp.exe" in page
    for path in (folder / "report.html", folder / "summary.md"):
        text = path.read_text()
        assert not any(c in text for c in "\x1b\x07\x08\x00\u202e"), path.name
