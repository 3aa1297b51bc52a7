"""The schedule a clean reference replays (world size per leg of the committed history, read from a
timeline), the sentence that names the reference, and report.json's ``final_state`` block rendered in
summary.md and report.html and read back by `elastic-chaos report`."""
from __future__ import annotations

import dataclasses
import html
import json
import shutil
from pathlib import Path

import pytest

from elastic_chaos.analysis.final_state import parse
from elastic_chaos.analysis.result import RunResult, result_of_timeline
from elastic_chaos.analysis.schedule import Leg, Reference, ReferenceKind, ScheduleUnknown, trained_schedule
from elastic_chaos.cli.main import main
from elastic_chaos.events import CheckpointEv, Event, ProgressEv, read_timeline
from elastic_chaos.reporting.load import load_run
from elastic_chaos.reporting.report import write_report
from elastic_chaos.reporting.run_report import RunReport

RUNS = Path(__file__).parent / "fixtures" / "runs"


def steps(world: int, first: int, last: int, t: float) -> list[Event]:
    """Steps ``first``..``last`` at ``world`` ranks (rank 0's lines), one a second from ``t``."""
    return [Event.make(ProgressEv.STEP, t + i, "node-0", {"step": s, "rank": 0, "world_size": world})
            for i, s in enumerate(range(first, last + 1))]


def resumed(step: int, world: int, t: float) -> Event:
    return Event.make(CheckpointEv.LOADED, t, "node-0", {"step": step, "world_size": world})


def test_a_recorded_shrink_trains_world_2_to_its_save_and_1_from_there():
    events = read_timeline(RUNS / "kill-node-shrink" / "timeline.jsonl").events
    legs = trained_schedule(events, 54)
    assert legs == (Leg(2, 0, 40), Leg(1, 40, 54))
    assert Reference.of(legs).describe() == (
        "reference: a clean replay of the faulted run's schedule: world size 2 to step 40, then 1 from its "
        "step-40 save to step 54, same trainer arguments and seed")


def test_a_recorded_recovery_with_a_replacement_is_one_clean_run():
    events = read_timeline(RUNS / "kill-node-replaced" / "timeline.jsonl").events
    reference = Reference.of(trained_schedule(events, 57))
    assert reference.kind is ReferenceKind.CLEAN_RUN and reference.legs == (Leg(2, 0, 57),)
    assert reference.describe() == ("reference: a clean run to step 57 at world size 2, same trainer arguments "
                                    "and seed")


def test_steps_trained_past_the_save_a_smaller_world_resumed_from_are_not_the_schedule():
    events = [resumed(0, 3, 0), *steps(3, 1, 27, 1), resumed(20, 2, 40), *steps(2, 21, 60, 41)]
    assert trained_schedule(events, 60) == (Leg(3, 0, 20), Leg(2, 20, 60))


def test_two_shrinks_are_three_legs_each_from_its_own_save():
    events = [resumed(0, 3, 0), *steps(3, 1, 45, 1), resumed(40, 2, 50), *steps(2, 41, 67, 51),
              resumed(60, 1, 80), *steps(1, 61, 100, 81)]
    legs = trained_schedule(events, 100)
    assert legs == (Leg(3, 0, 40), Leg(2, 40, 60), Leg(1, 60, 100))
    assert "world size 3 to step 40, then 2 from its step-40 save to step 60, then 1 from its step-60 save to " \
           "step 100" in Reference.of(legs).describe()


def test_a_resume_at_the_same_size_is_one_leg():
    events = [resumed(0, 2, 0), *steps(2, 1, 33, 1), resumed(20, 2, 40), *steps(2, 21, 60, 41)]
    assert Reference.of(trained_schedule(events, 60)).kind is ReferenceKind.CLEAN_RUN


def test_a_step_without_its_world_size_is_unknown_not_guessed():
    events = [resumed(0, 2, 0), *steps(2, 1, 30, 1), *steps(2, 35, 60, 40)]
    with pytest.raises(ScheduleUnknown, match="step 31 of the committed history"):
        trained_schedule(events, 60)


def test_a_world_that_changed_without_a_resume_is_unknown():
    events = [resumed(0, 2, 0), *steps(2, 1, 30, 1), *steps(1, 31, 60, 40)]
    with pytest.raises(ScheduleUnknown, match="from 2 to 1 after step 30, which the job did not resume from"):
        trained_schedule(events, 60)


EQUAL = {"equal": True, "a": "ref/ckpt-00000054.pt", "b": "run/ckpt-00000054.pt", "tolerance": 0.0,
         "compared": 35, "differing": 0, "step": {"a": 54, "b": 54}, "classes": {}, "first": None,
         "divergences": []}
REPLAY = Reference.of((Leg(2, 0, 40), Leg(1, 40, 54)))


def test_the_final_state_names_its_reference_and_reads_back_the_same():
    state = parse(EQUAL).with_reference(REPLAY)
    assert state.describe() == (
        "final state: equal (bitwise, 35 values at step 54; reference: a clean replay of the faulted run's "
        "schedule: world size 2 to step 40, then 1 from its step-40 save to step 54, same trainer arguments "
        "and seed)")
    raw = json.loads(json.dumps(state.to_json()))
    assert raw["reference"]["kind"] == "schedule-replay" and raw["comparison"] == "bitwise"
    assert raw["reference"]["legs"] == [{"world": 2, "start": 0, "end": 40}, {"world": 1, "start": 40, "end": 54}]
    assert parse(raw) == state


def test_a_replays_comparison_says_the_spread_of_two_clean_replays_it_allowed():
    bitwise = parse(EQUAL).with_reference(REPLAY).with_clean_spread(0.0)
    assert bitwise.describe().startswith("final state: equal (bitwise: two clean replays of the schedule were "
                                         "bitwise equal, 35 values at step 54; reference: a clean replay")
    noisy = parse({**EQUAL, "tolerance": 3e-07}).with_reference(REPLAY).with_clean_spread(3e-07)
    assert noisy.comparison == "within 3e-07: two clean replays of the schedule differed by up to 3e-07"
    raw = json.loads(json.dumps(noisy.to_json()))
    assert raw["clean_spread"] == 3e-07 and parse(raw) == noisy
    assert parse(EQUAL).comparison == "bitwise"   # a comparison of two given checkpoints says nothing more


@pytest.mark.parametrize("legs", [[], [{"world": 2, "start": 0}], [{"world": True, "start": 0, "end": 4}]])
def test_a_reference_without_whole_legs_is_refused(legs):
    with pytest.raises(ValueError):
        parse({**EQUAL, "reference": {"kind": "schedule-replay", "legs": legs}})


def report_with(tmp_path: Path, state: object) -> RunReport:
    folder = tmp_path / "run"
    shutil.copytree(RUNS / "kill-node-shrink", folder)
    (folder / "report.json").unlink()
    events = read_timeline(folder / "timeline.jsonl").events
    result: RunResult = dataclasses.replace(result_of_timeline(events), final_state=state)
    return RunReport(folder, result, events)


def test_the_final_state_block_is_in_report_json_summary_and_html_and_survives_a_re_render(tmp_path):
    state = parse(EQUAL).with_reference(REPLAY)
    report = report_with(tmp_path, state)
    rendered = write_report(report, png=False)
    assert rendered is not None
    block = json.loads((report.folder / "report.json").read_text())["final_state"]
    assert block["summary"] == state.describe() and block["reference"]["kind"] == "schedule-replay"
    said = ("Reference: a clean replay of the faulted run's schedule: world size 2 to step 40, then 1 from its "
            "step-40 save to step 54, same trainer arguments and seed")
    summary = (report.folder / "summary.md").read_text()
    assert "## Final state" in summary and f"- {said}" in summary
    assert "- equal: 0 of 35 values differ at step 54 (compared bitwise)" in summary
    page = rendered.html.read_text()
    assert 'id="final-state"' in page and html.escape(said) in page
    assert load_run(report.folder).result.final_state == state
    (report.folder / "summary.md").unlink()
    assert main(["report", str(report.folder)]) in (0, 1)   # re-rendered from report.json alone
    assert f"- {said}" in (report.folder / "summary.md").read_text()


def test_a_divergence_is_rendered_with_its_first_value_and_cause(tmp_path):
    diverged = {**EQUAL, "equal": False, "differing": 3, "classes": {"lr_scheduler": 1, "model": 2},
                "first": {"path": "optim.param_groups.0.lr", "state": "lr_scheduler", "detail": "0.01 in A, 0.009 in B",
                          "max_abs_diff": 0.001, "cause": "the LR scheduler's state is not saved or not restored"},
                "diverged_by": 40, "equal_at": 20}
    report = report_with(tmp_path, parse(diverged).with_reference(REPLAY))
    write_report(report, png=False)
    summary = (report.folder / "summary.md").read_text()
    assert ("- first divergence: LR scheduler diverged at optim.param_groups.0.lr (0.01 in A, 0.009 in B; max abs "
            "diff 0.001); equal at step 20, different from the save of step 40 on; likely cause: the LR "
            "scheduler's state is not saved or not restored") in summary


def test_a_run_without_a_comparison_has_no_final_state_block(tmp_path):
    report = report_with(tmp_path, None)
    write_report(report, png=False)
    assert json.loads((report.folder / "report.json").read_text())["final_state"] is None
    assert "Final state" not in (report.folder / "summary.md").read_text()
