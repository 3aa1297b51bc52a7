"""Preemption traces (elastic_chaos.faults.trace): the CSV a user exports, the bursts generator, the
mapping onto the job's node slots."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.events.fault_events import Replayed
from elastic_chaos.faults.trace import BUNDLED, Bursts, ReplayBy, bundled, bundled_names, parse_trace, read_trace
from elastic_chaos.hypotheses.replay import waiting_for


def test_iso_times_become_offsets_from_the_earliest_row():
    trace = parse_trace("time,node,group\n2025-03-02T14:06:40Z,b,g\n2025-03-02T14:05:11Z,a,g\n")
    assert [(p.offset_s, p.node) for p in trace.preemptions] == [(0.0, "a"), (89.0, "b")]


def test_a_time_without_a_zone_is_utc_and_epoch_seconds_work_too():
    trace = parse_trace("time\n2025-03-02T14:05:11\n1740924371\n")
    assert [p.offset_s for p in trace.preemptions] == [0.0, 60.0]


def test_offset_s_is_taken_as_given():
    trace = parse_trace("offset_s,node\n30,b\n5.5,a\n")
    assert [(p.offset_s, p.node, p.group) for p in trace.preemptions] == [(5.5, "a", None), (30.0, "b", None)]


def test_comments_and_unknown_columns_are_ignored():
    trace = parse_trace("# exported 2025-06\ntime,node,reason\n# a note\n2025-06-11T08:00:04Z,n1,PreemptionNotice\n")
    assert len(trace) == 1 and trace.preemptions[0].node == "n1"


def test_a_header_without_time_or_offset_is_refused_by_name():
    with pytest.raises(SpecError, match="neither a 'time' nor an 'offset_s'"):
        parse_trace("when,node\n1,a\n", "t.csv")


def test_an_unreadable_time_names_its_line():
    with pytest.raises(SpecError, match=r"t.csv:3: time 'yesterday'"):
        parse_trace("time,node\n2025-03-02T14:05:11Z,a\nyesterday,b\n", "t.csv")


def test_a_negative_offset_is_refused():
    with pytest.raises(SpecError, match=">= 0"):
        parse_trace("offset_s\n-3\n", "t.csv")


def test_slots_by_node_group_and_any():
    trace = parse_trace("offset_s,node,group\n0,a,g1\n1,b,g1\n2,c,g2\n3,a,g1\n")
    assert trace.slots(ReplayBy.NODE, 2) == [0, 1, 0, 0]
    assert trace.slots(ReplayBy.GROUP, 2) == [0, 0, 1, 0]
    assert trace.slots(ReplayBy.ANY, 2) == [None] * 4


def test_a_row_without_its_key_is_a_slot_of_its_own():
    assert parse_trace("offset_s,node\n0,\n1,\n").slots(ReplayBy.NODE, 4) == [0, 1]


def test_bursts_are_deterministic_and_each_hits_one_group_within_its_window():
    b = Bursts(bursts=3, burst_size=4, burst_window_s=180.0, burst_gap_s=1800.0, seed=5)
    trace = b.generate()
    assert trace == b.generate() and len(trace) == 12
    for g in {p.group for p in trace.preemptions}:
        times = [p.offset_s for p in trace.preemptions if p.group == g]
        assert len(times) == 4 and max(times) - min(times) <= 180.0


def test_a_generated_trace_keeps_its_parameters_when_written_and_read(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(Bursts(bursts=2, burst_size=2, seed=7).generate().to_csv())
    trace = read_trace(path)
    assert trace.source["generated"]["seed"] == "7" and trace.source["rows"] == 4 and len(trace.source["sha256"]) == 16


def test_the_bundled_traces_read_by_name():
    assert len(read_trace(Path("spot-3"))) == 3
    assert read_trace(Path("k8s-burst.csv")).slots(ReplayBy.GROUP, 2) == [0, 0, 0, 1]
    assert read_trace(Path("spot-3")).source["file"] == str(BUNDLED / "spot-3.csv")
    assert bundled_names() == ["k8s-burst", "spot-3"]


def test_a_file_of_the_same_name_wins_over_a_bundled_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("spot-3").write_text("offset_s,node\n5,a\n")
    assert [p.offset_s for p in read_trace(Path("spot-3")).preemptions] == [5.0]


def test_a_missing_trace_names_the_bundled_ones(tmp_path):
    with pytest.raises(SpecError, match=r"cannot read it .*bundled example: k8s-burst, spot-3"):
        read_trace(tmp_path / "spot-3")
    with pytest.raises(SpecError, match=r"bundled example: k8s-burst, spot-3"):
        read_trace(Path("spot-4"))


def test_every_trace_a_help_text_names_is_bundled():
    from elastic_chaos.cli import run, trace_cmd
    # a name or file an example passes (not FILE, not the flags, not the file the example before it writes)
    named = re.findall(r"(?:--trace|elastic-chaos trace) ([a-z][\w.-]*)", run.DESCRIPTION + trace_cmd.DESCRIPTION)
    names = set(named) - {"bursts.csv", "my-fleet.csv"}  # a file an example writes; a user's own trace
    assert names and all(bundled(Path(n)) != Path(n) for n in names), names


def test_the_replay_goodput_window_ends_where_the_replay_was_over():
    """The verdict (computed when the replay is over) and report.json (at teardown, with the
    steps trained since) read one window: a run once said 0.23 in its verdict and 0.24 in its table."""
    from elastic_chaos.analysis.replay import REPLAY_OVER, replay_goodput
    from elastic_chaos.events import Event, ProgressEv, RunnerEv

    def step(t, n):
        return Event.make(ProgressEv.STEP, t, "node-0", {"step": n, "rank": 0, "pid": 1})
    events = [step(i * 0.1, i) for i in range(1, 11)]                  # steady: 0.1 s a step, to step 10
    events += [step(6.0 + i * 0.1, 10 + i) for i in range(1, 11)]      # a preemption: 5 s lost, then to 20
    over = Event.make(RunnerEv.PHASE, 7.0, None, {"phase": REPLAY_OVER})
    after = [step(7.0 + i * 0.1, 20 + i) for i in range(1, 31)]         # teardown trains on
    start = 1.0
    at_verdict = replay_goodput([*events, over], start)
    assert at_verdict == replay_goodput([*events, over, *after], start)
    assert at_verdict is not None and abs(at_verdict - 10 * 0.1 / 6.0) < 0.01


# -- a skipped preemption is part of the replay hypothesis (issue 25, row 1) ------------------------
def _skipped(index: int, due_at: float) -> Replayed:
    return Replayed(index=index, due_at=due_at, outcome="skipped",
                    reason="only 1 node(s) alive, the job's minimum (--total-loss injects it anyway)")


def test_a_skip_while_an_earlier_replacement_was_on_its_way_is_justified_with_the_measured_time():
    # the cluster run of the issue: the 3rd preemption came 68 s after the 2nd, whose replacement took 75 s
    why = waiting_for(_skipped(2, 1155.0), [(1000.0, 70.0), (1087.0, 75.0)])
    assert why == "#2 came due 68 s after a preemption whose node was replaced 75 s after it"


def test_a_skip_while_the_job_was_whole_is_not_justified():
    assert waiting_for(_skipped(2, 1155.0), [(1000.0, 60.0), (1087.0, 54.0)]) is None   # back 14 s before it
    assert waiting_for(_skipped(0, 999.0), [(1000.0, None)]) is None                    # nothing before it


def test_a_replacement_that_never_came_justifies_the_skips_after_it():
    assert "no measured replacement" in (waiting_for(_skipped(1, 1500.0), [(1000.0, None)]) or "")
