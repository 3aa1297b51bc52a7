"""The scale harness's per-thread CPU meter (bench.rdzv.cpu.threads_on_cpu_ns): an idle agent uses a few
milliseconds of CPU a second, below /proc/PID/stat's 10 ms ticks; the steady window needs nanoseconds."""
from __future__ import annotations

import os
import threading
import time

from bench.rdzv.cpu import on_cpu_between_s, proc_cpu_s, threads_on_cpu_ns


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_few_milliseconds_of_work_are_measured_where_clock_ticks_see_none_or_one():
    before = threads_on_cpu_ns([os.getpid()])
    _spin(0.004)
    after = threads_on_cpu_ns([os.getpid()])
    used = on_cpu_between_s(before, after)
    assert 0.004 <= used < 0.5


def test_a_thread_born_in_the_window_counts_and_one_that_ended_in_it_is_left_out():
    go, stop = threading.Event(), threading.Event()
    ended = threading.Thread(target=lambda: (go.wait(5), _spin(0.05)))
    ended.start()
    before = threads_on_cpu_ns([os.getpid()])
    go.set()
    ended.join()  # its 50 ms fall in the window, but it is gone at the end: not counted
    born = threading.Thread(target=lambda: (_spin(0.02), stop.wait(5)))
    born.start()
    try:
        time.sleep(0.1)
        used = on_cpu_between_s(before, threads_on_cpu_ns([os.getpid()]))
        assert 0.02 <= used < 0.05
    finally:
        stop.set()
        born.join()


def test_a_gone_process_has_no_threads():
    assert threads_on_cpu_ns([2**22 + 12345]) == {}
    assert proc_cpu_s(2**22 + 12345) == 0.0
