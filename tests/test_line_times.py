"""The LogFollower's line-time index (elastic_chaos.watchers.line_times): each sample of a node log's size
bounds when its bytes were written, kept beside the log, so a line with no time of its own can be
timed later; and a --progress-regex step carries its own line's window (``written_after``, its time)."""
from __future__ import annotations

import io
import itertools
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from elastic_chaos.events import ProgressEv, Timeline, of
from elastic_chaos.spec import Observation
from elastic_chaos.watchers.line_times import (
    RECORD_BURST,
    RECORDS_PER_S,
    LineTimes,
    TimesWriter,
    WriteWindows,
    times_path,
)
from elastic_chaos.watchers.logs import LogFollower
from elastic_chaos.watchers.script_lines import ScriptLines
from elastic_chaos.watchers.timed_lines import Quiet, log_lines


def append(path: Path, text: str) -> float:
    """Append ``text``; returns when it was written."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    return time.time()


def append_timed(path: Path, text: str) -> tuple[float, float]:
    """Append ``text``; returns a time before the write and one after it."""
    before = time.time()
    return before, append(path, text)


def steps_follower(log: Path, tmp_path: Path) -> tuple[LogFollower, Timeline]:
    tl = Timeline()
    return LogFollower(tl, lambda: {"node-0": log}, ScriptLines(Observation(progress_regex=r"step (?P<step>\d+)")),
                       index=tmp_path), tl


def wait_until(condition: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "the follower's thread did not sample the log"
        time.sleep(0.001)


MTIME_TICK_S = 0.01
"""An upper bound may be the log's mtime, on the kernel's coarse clock: up to a tick before our own clock's."""


def assert_within(window: tuple[float | None, float], written: tuple[float, float]) -> None:
    """A line's window holds its write: its lower bound is no later than the write, its upper one no earlier."""
    (after, by), (before, wrote) = window, written
    assert after is not None and after <= wrote
    assert by >= before - MTIME_TICK_S


def test_a_line_written_just_after_a_moment_is_known_to_come_after_it(tmp_path):
    # a save at T0, its next step line 20 ms later, both in one 0.1 s read: the 10 ms sampler tells them apart
    log = tmp_path / "node-0.log"
    log.write_text("")
    follower, tl = steps_follower(log, tmp_path)
    written: dict[int, tuple[float, float]] = {}
    with follower:
        wait_until(lambda: follower.looked("node-0") is not None)
        written[0] = append_timed(log, "step 0\n")
        time.sleep(0.3)
        t0 = time.time()
        wait_until(lambda: (follower.looked("node-0") or 0.0) >= t0)   # the thread samples on its own
        time.sleep(max(0.0, t0 + 0.02 - time.time()))
        written[1] = append_timed(log, "step 1\n")
        for k in range(2, 12):                                         # a gap the sampler resolves
            time.sleep(0.03)
            written[k] = append_timed(log, f"step {k}\n")
        time.sleep(0.15)
    steps = {e.data.step: e for e in of(tl.events(), ProgressEv.STEP)}
    assert sorted(steps) == list(range(12))
    b_after = steps[1].data.written_after
    assert b_after is not None and b_after >= t0                      # B came after T0
    for k, step in steps.items():
        assert_within((step.data.written_after, step.t), written[k])
    assert statistics.median(s.t - (s.data.written_after or 0.0) for s in steps.values()) < 0.05


def test_the_lines_of_one_read_get_ordered_windows_of_their_own(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("")
    follower, tl = steps_follower(log, tmp_path)
    follower.poll()
    written = []
    for k in range(4):
        written.append(append_timed(log, f"step {k}\n"))
        time.sleep(0.03)
        follower.sample()                                              # what the thread does every 10 ms
    follower.poll()                                                    # one read gets the four lines
    follower.finish()
    steps = of(tl.events(), ProgressEv.STEP)
    assert [s.data.step for s in steps] == [0, 1, 2, 3]
    for step, w in zip(steps, written, strict=True):
        assert_within((step.data.written_after, step.t), w)
        assert step.t - (step.data.written_after or 0.0) < 0.05
    for earlier, later in itertools.pairwise(steps):
        assert later.data.written_after is not None and earlier.t <= later.data.written_after


def test_the_index_keeps_a_record_per_sample_and_gives_each_line_its_window(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("")
    follower, tl = steps_follower(log, tmp_path)
    follower.poll()
    lines = ["step 1\n", "step 2\n", "step 3 and a longer line\n"]
    for text in lines:
        append(log, text)
        time.sleep(0.02)
        follower.sample()
    follower.poll()
    follower.finish()
    records = times_path(log).read_text().splitlines()
    ends = [sum(len(t) for t in lines[:k + 1]) for k in range(len(lines))]
    assert [int(r.split()[0]) for r in records] == ends             # one read, three records
    times = LineTimes.load(log)
    assert times is not None
    for step, first, end in zip(of(tl.events(), ProgressEv.STEP), [0, *ends[:-1]], ends, strict=True):
        window = times.written(first, end - 1)
        assert window is not None and window.after is not None
        assert abs(window.after - (step.data.written_after or 0.0)) <= 0.001
        assert abs(window.by - step.t) <= 0.001                     # rounded outward to the ms


def test_a_chatty_log_merges_samples_past_the_index_budget_and_keeps_them_right(tmp_path):
    log = tmp_path / "node-0.log"
    writer = TimesWriter(log)
    t = 1000.0
    windows = WriteWindows(t, writer)               # an empty log, looked at at t
    for k in range(1, 1001):                        # a sample every 2 ms, each seeing 10 more bytes: 500 a second
        t += 0.002
        windows.sample(10 * k, t, t + 0.0005)       # (size, looked before the fstat, its mtime)
        if k % 50 == 0:
            windows.flush(t + 0.001)                # a read every 0.1 s writes what was noted
    windows.close()
    records = times_path(log).read_text().splitlines()
    assert RECORDS_PER_S * 1.5 < len(records) <= RECORDS_PER_S * 2.0 + RECORD_BURST   # 2 s of samples
    assert int(records[-1].split()[0]) == 10_000                    # the last bytes are covered
    times = LineTimes.load(log)
    assert times is not None
    for k in range(1, 1001):                        # bytes 10(k-1)..10k-1: after sample k-1 looked, by sample k
        window = times.written(10 * (k - 1), 10 * k - 1)
        assert window is not None and window.after is not None
        assert window.after <= 1000.0 + 0.002 * (k - 1) + 1e-9 and window.by >= 1000.0 + 0.002 * k + 0.0005 - 1e-9


def test_the_follower_keeps_when_each_read_was_written_beside_the_log(tmp_path):
    log = tmp_path / "nodes" / "node-0.log"
    log.parent.mkdir()
    log.write_text("")
    tl = Timeline(tmp_path / "timeline.jsonl")     # the report folder: where the index may be written
    follower = LogFollower(tl, lambda: {"node-0": log})
    follower.poll()
    looked = time.time()
    time.sleep(0.02)
    wrote_1 = append(log, "epoch 1 done\n")
    follower.poll()
    time.sleep(0.02)
    wrote_2 = append(log, "epoch 2 done\nepoch 3 done\n")
    follower.poll()
    follower.finish()
    tl.close()
    records = times_path(log).read_text().splitlines()
    assert [int(r.split()[0]) for r in records] == [len("epoch 1 done\n"), log.stat().st_size]
    after_1, by_1 = (float(x) for x in records[0].split()[1:])
    assert after_1 <= looked and wrote_1 - 0.01 <= by_1 <= time.time()   # the first look did not see it
    times = LineTimes.load(log)
    assert times is not None
    second = times.written(len("epoch 1 done\n"), log.stat().st_size - 1)
    assert second is not None and second.after is not None
    assert wrote_1 - 0.01 <= second.after <= wrote_2 <= second.by + 0.01  # after the read that got line 1


def test_a_regex_step_carries_the_look_before_its_line_was_there(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("")
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": log}, ScriptLines(Observation(progress_regex=r"epoch (?P<step>\d+)")),
                           index=tmp_path)
    follower.poll()
    before = time.time()
    time.sleep(0.02)
    wrote = append(log, "epoch 4 done\n")
    follower.poll()
    follower.finish()
    (step,) = of(tl.events(), ProgressEv.STEP)
    assert step.data.step == 4 and step.data.written_after is not None
    assert step.data.written_after <= before < wrote <= step.t + 0.01   # a lower and an upper bound
    assert wrote - step.data.written_after < 1.0


def test_the_first_read_of_a_log_knows_no_lower_bound(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("epoch 1 done\n")
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": log}, ScriptLines(Observation(progress_regex=r"epoch (?P<step>\d+)")),
                           index=tmp_path)
    follower.poll()
    follower.finish()
    (step,) = of(tl.events(), ProgressEv.STEP)
    assert step.data.written_after is None
    assert times_path(log).read_text().split()[1] == "-"


def test_a_log_that_appears_later_is_bounded_by_the_look_that_missed_it(tmp_path):
    log = tmp_path / "node-0.log"
    follower = LogFollower(Timeline(), lambda: {"node-0": log}, index=tmp_path)
    follower.poll()                                   # no file yet
    missed = time.time()
    append(log, "hello\n")
    follower.poll()
    follower.finish()
    times = LineTimes.load(log)
    assert times is not None
    window = times.written(0, 5)
    assert window is not None and window.after is not None and window.after <= missed


def test_no_index_for_a_log_outside_the_report_folder(tmp_path):
    (tmp_path / "report").mkdir()
    log = tmp_path / "elsewhere" / "node-0.log"      # someone's logs, followed by `watch`: not ours to write beside
    log.parent.mkdir()
    log.write_text("epoch 1 done\n")
    tl = Timeline(tmp_path / "report" / "timeline.jsonl")
    follower = LogFollower(tl, lambda: {"node-0": log})
    follower.poll()
    follower.finish()
    tl.close()
    assert not times_path(log).exists()


def test_an_index_that_cannot_be_written_leaves_the_follower_reading(tmp_path):
    log = tmp_path / "node-0.log"
    times_path(log).mkdir()                           # in the way: the index cannot be opened
    log.write_text("epoch 1 done\n")
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": log}, ScriptLines(Observation(progress_regex=r"epoch (?P<step>\d+)")),
                           index=tmp_path)
    follower.poll()
    follower.finish()
    assert [e.data.step for e in of(tl.events(), ProgressEv.STEP)] == [1]
    assert LineTimes.load(log) is None


def test_a_record_cut_off_by_a_crash_and_a_second_followers_records_are_skipped(tmp_path):
    log = tmp_path / "node-0.log"
    log.write_text("a\nb\nc\n")
    writer = TimesWriter(log)
    writer.record(2, None, 100.0)
    writer.record(4, 100.1, 100.2)
    writer.record(4, 90.0, 300.0)                     # a second follower, from the start: not later bytes
    writer.close()
    with open(times_path(log), "a") as f:
        f.write("6 100.3 10")                         # the crash: no end of line
    times = LineTimes.load(log)
    assert times is not None and times.covered == 4
    assert times.written(2, 3) == times.written(3, 3)
    window = times.written(2, 3)
    assert window is not None and (window.after, window.by) == (100.1, 100.2)
    assert times.written(4, 5) is None                # past what the index covers
    assert times.offset_before(100.15) == 2 and times.offset_before(99.0) == 0


def test_log_lines_end_at_either_line_end_and_keep_their_offsets():
    data = b"one\r\ntwo\rthree\n\nfour"
    lines = list(log_lines(io.BytesIO(data)))
    assert [h for _, _, h in lines] == [b"one", b"two", b"three", b"four"]
    for first, last, head in lines:
        assert data[first:last + 1].rstrip(b"\r\n") == head


def test_log_lines_start_at_the_next_line_when_put_inside_one():
    data = b"first line\nsecond\n"
    assert [h for _, _, h in log_lines(io.BytesIO(data), 3)] == [b"second"]
    assert [h for _, _, h in log_lines(io.BytesIO(data), 11)] == [b"second"]


def test_a_long_quiet_stretch_comes_as_its_ends_and_a_count():
    data = b"".join(b"line %d\n" % i for i in range(1000)) + b"an Error line\n" + b"tail\n"

    def marks(buf: bytes):
        at = buf.find(b"Error")
        return [(at, 0)] if at >= 0 else []

    items = list(log_lines(io.BytesIO(data), 0, marks, keep=3))
    quiet, error, tail = items
    assert isinstance(quiet, Quiet) and quiet.count == 1000
    assert [h for _, _, h in quiet.head] == [b"line 0", b"line 1", b"line 2"]
    assert [h for _, _, h in quiet.tail] == [b"line 997", b"line 998", b"line 999"]
    assert error[2] == b"an Error line" and tail[2] == b"tail"
