"""The event vocabulary and the timeline's query helpers."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from elastic_chaos.events import (
    ALL_TYPES,
    AgentEv,
    CheckpointEv,
    Event,
    EventType,
    FaultEv,
    NodeEv,
    ProgressEv,
    RdzvEv,
    Source,
    Timeline,
    first,
    last,
    of,
    read_events,
    read_timeline,
)
from elastic_chaos.events.node_events import Lost
from elastic_chaos.events.progress_events import Step
from elastic_chaos.watchers.logs import PREFIX, parse_progress

ROOT = Path(__file__).parents[1]
RECORDED = sorted((ROOT / "tests" / "fixtures" / "runs").glob("*/timeline.jsonl"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_every_event_of_a_recorded_run_has_a_declared_type(path):
    undeclared = {str(e.type) for e in read_events(path)} - {str(t) for t in ALL_TYPES}
    assert not undeclared


def test_every_event_the_trainer_reports_has_a_declared_type():
    names = {m[1] for f in (ROOT / "elastic_chaos" / "trainer").glob("*.py")
             for m in re.finditer(r'\bemit\("(\w+)"', f.read_text())}
    assert {"start", "step", "checkpoint_saved", "finished"} <= names
    parsed = {n: parse_progress(PREFIX + json.dumps({"ev": n, "t": 1.0, "step": 1}), "node-0") for n in names}
    assert {n: e.type for n, e in parsed.items() if e is None or e.type not in ALL_TYPES} == {}


def test_the_code_builds_no_event_type_outside_the_vocabulary():
    # the one exception: elastic_chaos.trainer.progress names pass through as progress/<name> (a script's own)
    allowed = {"elastic_chaos/events/types.py"}
    builders = [f"{p.relative_to(ROOT)}:{n.lineno}" for folder in ("elastic_chaos", "bench")
                for p in (ROOT / folder).rglob("*.py") if str(p.relative_to(ROOT)) not in allowed
                for n in ast.walk(ast.parse(p.read_text()))
                if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "EventType"]
    assert builders == []


def test_every_source_has_a_namespace_and_every_type_a_known_source():
    assert {t.source for t in ALL_TYPES} == {s.value for s in Source}
    assert len({str(t) for t in ALL_TYPES}) == len(ALL_TYPES)


def test_a_type_read_back_from_json_is_the_declared_constant():
    tl = Timeline()
    event = tl.emit(ProgressEv.STEP, "node-0", Step(step=3), t=12.5)
    back = Event.from_json(json.loads(json.dumps(event.to_json())))
    assert back.type == ProgressEv.STEP and back.type in {ProgressEv.STEP} and hash(back.type) == hash(ProgressEv.STEP)
    assert (back.type.source, back.type.name) == ("progress", "step") and str(back.type) == "progress/step"
    assert back.data == event.data and back.data.step == 3
    assert EventType(Source.PROGRESS, "step") == ProgressEv.STEP and back.type.payload is ProgressEv.STEP.payload


def test_the_timeline_writes_the_same_json_line_as_before(tmp_path):
    tl = Timeline(tmp_path / "timeline.jsonl")
    tl.emit(NodeEv.LOST, "node-1", Lost(action="sigkill-all"), t=5.1234567)
    tl.emit(RdzvEv.STORE_REACHABLE, t=6.0)
    tl.close()
    assert (tmp_path / "timeline.jsonl").read_text().splitlines() == [
        '{"t":5.123457,"source":"node","kind":"lost","node":"node-1","data":{"action":"sigkill-all"}}',
        '{"t":6.0,"source":"rendezvous","kind":"store_reachable","node":null,"data":{}}']


def test_an_undeclared_type_reads_back_and_matches_no_constant():
    e = Event.from_json({"t": 1.0, "source": "telemetry", "kind": "gpu_ecc"})
    assert str(e.type) == "telemetry/gpu_ecc" and e.type not in ALL_TYPES
    assert of([e], Source.NODE) == [] and of([e]) == [e]


def events() -> list[Event]:
    # in arrival order, not time order: watchers add slightly late
    return [Event.make(ProgressEv.STEP, 3.0, "node-0", {"step": 2}),
            Event.make(ProgressEv.STEP, 1.0, "node-0", {"step": 1}),
            Event.make(FaultEv.INJECTED, 2.0, "node-1", {"fault": "kill-node"}),
            Event.make(AgentEv.WORKER_FAILED, 2.5, "node-0"),
            Event.make(ProgressEv.STEP, 4.0, "node-1", {"step": 2}),
            Event.make(CheckpointEv.LOADED, 4.0, "node-0", {"step": 1})]


def test_of_selects_by_type_and_source_in_time_order():
    assert [e.t for e in of(events(), ProgressEv.STEP)] == [1.0, 3.0, 4.0]
    assert [e.type for e in of(events(), Source.FAULT, AgentEv.WORKER_FAILED)] == [FaultEv.INJECTED,
                                                                                   AgentEv.WORKER_FAILED]
    assert len(of(events())) == 6


def test_after_is_exclusive_until_inclusive_and_node_exact():
    assert [e.t for e in of(events(), ProgressEv.STEP, after=1.0, until=4.0)] == [3.0, 4.0]
    assert [e.t for e in of(events(), ProgressEv.STEP, node="node-0")] == [1.0, 3.0]


def test_first_and_last_keep_arrival_order_between_equal_times():
    assert first(events(), ProgressEv.STEP, after=1.0).t == 3.0
    assert first(events(), after=3.5).type == ProgressEv.STEP           # the step arrived before the load
    assert last(events(), until=4.0).type == CheckpointEv.LOADED
    assert last(events(), ProgressEv.STEP, where=lambda e: e.node == "node-0").t == 3.0
    assert first(events(), RdzvEv.ROUND_COMPLETE) is None


def test_a_timeline_selects_from_its_snapshot():
    tl = Timeline()
    for e in events():
        tl.add(e)
    assert [e.data.step for e in tl.select(ProgressEv.STEP, node="node-0")] == [1, 2]


def test_every_declared_type_carries_a_payload_of_its_own():
    from elastic_chaos.events import Payload, Undeclared
    assert all(issubclass(t.payload, Payload) and t.payload is not Undeclared for t in ALL_TYPES)


def test_a_line_whose_field_has_the_wrong_type_is_named_by_line_and_field(tmp_path):
    path = tmp_path / "timeline.jsonl"
    good = {"t": 1.0, "source": "progress", "kind": "step", "node": "n", "data": {"step": 1}}
    bad = {"t": 2.0, "source": "checkpoint", "kind": "saved", "node": None, "data": {"step": "seven"}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n" + json.dumps(good) + "\n")
    read = read_timeline(path)
    assert len(read.events) == 2 and [e.line for e in read.errors] == [2]
    assert "checkpoint/saved: field 'step' must be an integer or null, not 'seven'" in read.errors[0].reason
    note = read.note()
    assert note is not None and "line 2" in note and "cut off" not in note


def test_only_a_last_line_that_is_not_json_is_called_cut_off(tmp_path):
    path = tmp_path / "timeline.jsonl"
    line = '{"t": 1.0, "source": "progress", "kind": "step", "node": "n", "data": {"step": 1}}'
    path.write_text(line + '\n{"t": 2.0, "so')
    read = read_timeline(path)
    assert len(read.events) == 1 and read.errors[0].cut_off
    assert read.note() == ("the last line of timeline.jsonl was cut off mid-write (the run crashed or was killed) "
                           "and was skipped")


def test_undeclared_fields_are_kept_and_written_back_unchanged():
    raw = {"t": 1.0, "source": "progress", "kind": "step", "node": "n",
           "data": {"step": 3, "rank": 0, "my_metric": {"acc": 0.5}}}
    e = Event.from_json(raw)
    assert e.data.step == 3 and e.data.extra == {"my_metric": {"acc": 0.5}}
    assert Event.from_json(json.loads(json.dumps(e.to_json()))).data == e.data


def test_a_payload_of_another_type_is_refused_when_an_event_is_made():
    from elastic_chaos.events.node_events import Lost
    with pytest.raises(TypeError, match="carries Step, not Lost"):
        Event.make(ProgressEv.STEP, 1.0, "n", Lost(action="x"))


def test_every_trainer_progress_line_of_the_recorded_runs_reads_as_its_declared_payload():
    from elastic_chaos.watchers.logs import read_progress
    lines = [line for log in sorted((ROOT / "tests" / "fixtures" / "runs").glob("*/nodes/*.log"))
             for line in log.read_text(errors="replace").splitlines() if PREFIX in line]
    assert len(lines) > 1000
    read = [read_progress(line, "node-0") for line in lines]     # raises PayloadError on a wrong field
    assert all(e is not None for e in read)


@pytest.mark.parametrize("written, kept", [("NaN", "nan"), ("Infinity", "inf"), ("-Infinity", "-inf")])
def test_a_step_whose_loss_is_not_finite_is_kept_with_its_loss_as_null(written, kept):
    # a diverged script's NaN is its data: dropping the step would cost the verdict a step and its samples
    import json

    from elastic_chaos.watchers.logs import read_progress
    line = (f'{PREFIX}{{"ev":"step","t":1.5,"rank":1,"world_size":2,"step":65,"epoch_size":2048,'
            f'"loss":{written},"samples":[[2032,2048]]}}')
    e = read_progress(line, "node-2")
    assert e is not None and e.type == ProgressEv.STEP and e.data.step == 65
    assert e.data.loss is None and e.data.extra["loss_not_finite"] == kept
    assert e.data.samples == ((2032, 2048),)
    json.dumps(e.to_json(), allow_nan=False)  # the timeline line it becomes is strict JSON


def test_what_the_trainer_reports_on_a_spot_notice_reads_as_its_payload(capsys):
    import io

    from elastic_chaos.trainer import progress
    from elastic_chaos.trainer.spot_notice import Notice
    from elastic_chaos.watchers.logs import read_progress
    out = io.StringIO()
    progress._stream = out
    try:
        n = Notice("interruption", 1.0, {"action": "terminate", "time": "2026-11-26T00:06:32Z"})
        progress.emit("notice", notice=n.kind, detail=n.detail)
    finally:
        progress._stream = None
    e = read_progress(out.getvalue().strip(), "node-1")
    assert e is not None and e.type == ProgressEv.NOTICE and e.data.detail["action"] == "terminate"
