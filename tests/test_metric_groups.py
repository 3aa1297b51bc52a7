"""Metric groups are declared once and every view iterates them: a toy group, registered in this
file alone, shows up in report.json (and reads back), summary.md, report.html, metrics.prom and
the JUnit properties, for the faults it applies to and no other."""
from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from elastic_chaos.analysis.groups import FaultGroup, FaultMark, fault_group
from elastic_chaos.analysis.metrics import Unit, metric
from elastic_chaos.analysis.registry import fault_groups, register, unregister
from elastic_chaos.analysis.result import result_of_timeline
from elastic_chaos.events import Event, ProgressEv, read_timeline
from elastic_chaos.reporting.load import load_run
from elastic_chaos.reporting.report import render_table, write_report
from elastic_chaos.reporting.run_report import RunReport
from elastic_chaos.reporting.views.failure import metric_properties

RUNS = Path(__file__).parent / "fixtures" / "runs"


@dataclass
class StepsBefore:
    """How many steps rank 0 reported before the fault (a toy measurement)."""

    steps_before: int | None = metric("steps before", Unit.COUNT, "steps rank 0 reported before the fault",
                                      table=True, junit=True)
    missing: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"steps_before": self.steps_before, "missing": list(self.missing)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> StepsBefore:
        n = raw.get("steps_before")
        return cls(n if isinstance(n, int) else None)


def _measure(events: Sequence[Event], mark: FaultMark) -> StepsBefore:
    return StepsBefore(sum(1 for e in events if e.type == ProgressEv.STEP and e.t <= mark.injected_at
                           and (e.data.rank or 0) == 0))


TOY = fault_group("toy", "Toy: steps before the fault", StepsBefore, faults={"kill-node"}, measure=_measure,
                  read=lambda mark, raw: StepsBefore.from_json(raw))


@pytest.fixture
def toy() -> Iterator[FaultGroup[StepsBefore]]:
    register(TOY)
    yield TOY
    unregister(TOY)


def report_of(tmp_path: Path, name: str) -> RunReport:
    folder = tmp_path / name
    shutil.copytree(RUNS / name, folder)
    (folder / "report.json").unlink()
    events = read_timeline(folder / "timeline.jsonl").events
    return RunReport(folder, result_of_timeline(events), events)


def test_a_registered_group_reaches_every_view(toy, tmp_path):
    report = report_of(tmp_path, "kill-node-shrink")
    counted = report.result.faults[0].measured["toy"].steps_before
    assert counted and counted > 10
    rendered = write_report(report, png=False)
    assert rendered is not None
    data = json.loads((report.folder / "report.json").read_text())
    assert data["faults"][0]["toy"] == {"steps_before": counted, "missing": []}
    assert load_run(report.folder).result.faults[0].measured["toy"].steps_before == counted
    summary = (report.folder / "summary.md").read_text()
    assert "## Toy: steps before the fault" in summary and f"| kill-node | node-1 | {counted} |" in summary
    assert 'id="toy"' in rendered.html.read_text()
    prom = (report.folder / "metrics.prom").read_text()
    assert 'elastic_chaos_toy_steps_before{fault="kill-node",index="0"' in prom
    assert prom.split("elastic_chaos_toy_steps_before{", 1)[1].split("\n")[0].endswith(f" {counted}.0")
    assert ("chaos.fault0.toy.steps_before", str(counted)) in metric_properties(report.result, None)
    assert "Toy: steps before the fault" in render_table(report.result)


def test_a_group_measures_only_the_faults_it_applies_to(toy, tmp_path):
    report = report_of(tmp_path, "straggler-half-speed")
    assert "toy" not in report.result.faults[0].measured
    write_report(report, png=False)
    assert "toy" not in json.loads((report.folder / "report.json").read_text())["faults"][0]
    assert "Toy" not in (report.folder / "summary.md").read_text()


def test_the_built_in_groups_are_recovery_throughput_hang_and_replay():
    assert [g.name for g in fault_groups()][:3] == ["recovery", "throughput", "hang"]
    assert {g.name: sorted(g.faults) for g in fault_groups()}["throughput"] == ["straggler"]


def test_a_second_group_under_a_taken_name_is_refused(toy):
    with pytest.raises(ValueError, match="registered already"):
        register(fault_group("toy", "another", StepsBefore, measure=_measure,
                             read=lambda mark, raw: StepsBefore.from_json(raw)))


def test_a_straggler_shows_its_step_rates_instead_of_a_recovery_row(tmp_path):
    report = report_of(tmp_path, "straggler-half-speed")
    text = render_table(report.result)
    assert "Step rate while a node was slow" in text and "regain" not in text.split("verdict")[0]


def test_a_corrupted_checkpoint_shows_what_was_hit_and_whether_the_job_noticed_instead_of_a_recovery_row():
    # corrupt-checkpoint interrupts nothing: before, its recovery row said "no survivor noticed the fault"
    # and "progress never passed the pre-fault step" of an interruption that never happened
    from elastic_chaos.analysis.corruption import CORRUPTION
    from elastic_chaos.events import CheckpointEv, FaultEv
    from elastic_chaos.events.records import FaultRecord
    from elastic_chaos.reporting.views.table import notes, remarks, tables
    f = "/ckpt/ckpt-00000060.pt"
    record = FaultRecord("corrupt-checkpoint", None, 10.0,
                         detail={"file": f, "step": 60, "tensor": "model.2.weight", "bits": 3})
    steps = [Event.make(ProgressEv.STEP, 1.0 + i, "node-0", {"rank": 0, "step": i, "world_size": 2})
             for i in range(20)]
    events = [*steps, Event.make(FaultEv.INJECTED, 10.0, None, record.event_payload()),
              Event.make(CheckpointEv.CORRUPT, 12.0, "node-0", {"path": f, "reason": "ChecksumMismatch"}),
              Event.make(CheckpointEv.CORRUPT, 12.1, "node-1", {"path": f, "reason": "ChecksumMismatch"})]
    result = result_of_timeline(sorted(events, key=lambda e: e.t))
    [fault] = result.faults
    cost = fault.group(CORRUPTION)
    assert cost is not None and (cost.step, cost.bits, cost.reports) == (60, 3, 2)
    assert cost.describe() == ("3 bit(s) of model.2.weight flipped in step 60's save: the job reported it corrupt "
                               "2 time(s)")
    shown = [t.group for t in tables(result)]
    assert "corruption" in shown and "recovery" not in shown
    assert not [line for line in [*notes(result), *remarks(result)] if line.startswith("corrupt-checkpoint")]
    silent = result_of_timeline(sorted(events[:-2], key=lambda e: e.t)).faults[0].group(CORRUPTION)
    assert silent is not None and silent.reports == 0 and "a silent load" in silent.describe()



def test_a_damaged_shard_shows_what_was_done_and_the_reports_naming_its_folder_instead_of_a_recovery_row():
    # before: damage-shard's recovery row said "the next fault came before this one's recovery completed"
    from elastic_chaos.analysis.corruption import CORRUPTION
    from elastic_chaos.events import CheckpointEv, FaultEv
    from elastic_chaos.events.records import FaultRecord
    from elastic_chaos.reporting.views.table import notes, remarks, tables
    folder = "/ckpt/step-00000060"
    record = FaultRecord("damage-shard", None, 10.0, detail={
        "file": folder + "/__1_0.distcp", "folder": folder, "step": 60, "rank": 1, "action": "truncate",
        "size_before": 4096, "size_after": 2048})
    steps = [Event.make(ProgressEv.STEP, 1.0 + i, "node-0", {"rank": 0, "step": i, "world_size": 2})
             for i in range(20)]
    events = [*steps, Event.make(FaultEv.INJECTED, 10.0, None, record.event_payload()),
              Event.make(CheckpointEv.CORRUPT, 12.0, "node-0", {"path": folder, "reason": "CheckpointException"})]
    result = result_of_timeline(sorted(events, key=lambda e: e.t))
    cost = result.faults[0].group(CORRUPTION)
    assert cost is not None and (cost.step, cost.bits, cost.reports) == (60, None, 1)
    assert cost.describe() == ("rank 1's shard truncated to 2048 of 4096 bytes in step 60's save: the job reported "
                               "it corrupt 1 time(s)")
    assert "recovery" not in [t.group for t in tables(result)]
    assert not [line for line in [*notes(result), *remarks(result)] if line.startswith("damage-shard")]
