"""Node log excerpts around a fault (elastic_chaos.reporting.views.excerpts), read from real log files: a line
without a time of its own is placed when it was written (by the LogFollower's line-time index,
else between the timed lines around it), a 100 MB log is streamed, and the killed node's last
lines and a survivor's failure are shown even where the window would cut them."""
from __future__ import annotations

import datetime
import json
import os
import shutil
import time
import tracemalloc
from pathlib import Path

from elastic_chaos.events import Timeline
from elastic_chaos.reporting import render_folder
from elastic_chaos.reporting.views.excerpts import AFTER_MAX_S, Excerpt, excerpt, line_time
from elastic_chaos.watchers.line_times import TimesWriter
from elastic_chaos.watchers.logs import LogFollower

RUNS = Path(__file__).parent / "fixtures" / "runs"
AGENT = "torch/distributed/elastic/agent/server/api.py"
MULTI = "torch/distributed/elastic/multiprocessing/api.py"


def glog(t: float, message: str, where: str = AGENT, level: str = "I") -> str:
    """A line as torch's elastic agent writes it (local time, as the local platform's nodes do)."""
    return f"{level}{datetime.datetime.fromtimestamp(t):%m%d %H:%M:%S.%f} 4242 {where}:942] {message}\n"


def step(t: float, n: int) -> str:
    return "ELASTIC_CHAOS " + json.dumps({"ev": "step", "t": t, "step": n, "rank": 0}) + "\n"


TRACEBACK = ("[rank0]: Traceback (most recent call last):\n"
             '[rank0]:   File "train.py", line 144, in main\n'
             "[rank0]:     loss.backward()\n"
             "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:22933\n")


def failed(t: float) -> str:
    return (glog(t, "failed (exitcode: 1) local_rank: 0 (pid: 77) of binary: python", MULTI, "E")
            + glog(t, "[default] Worker group FAILED. 2/3 attempts left; will restart worker group"))


def texts(ex: Excerpt) -> list[str]:
    return [ln.text for ln in ex.lines]


def line(ex: Excerpt, text: str):
    return next(ln for ln in ex.lines if text in ln.text)


def test_untimed_lines_after_an_old_agent_line_are_placed_before_the_next_timed_one(tmp_path):
    # no index (an older run): the epoch lines lie between the worker's start and the agent's next line
    t = time.time()
    log = tmp_path / "node-1.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + "epoch 6 loss 0.31\nepoch 7 loss 0.29\n"
                   + glog(t + 0.4, "[default] Received SIGTERM death signal, shutting down workers"))
    ex = excerpt("node-1", log, t - 3, t + 10, killed_at=t)
    last = line(ex, "epoch 7")
    assert last.inferred and not last.pulled
    assert last.after is not None and last.before is not None
    assert abs(last.after - (t - 100)) < 1e-3 and abs(last.before - (t + 0.4)) < 1e-3   # the glog lines' times
    assert "times inferred for 2 line(s)" in ex.summary(t)


def test_untimed_lines_are_placed_by_the_followers_reads_with_an_index(tmp_path):
    t = time.time()
    log = tmp_path / "node-1.log"
    log.write_text(glog(t - 100, "[default] Starting worker group"))
    follower = LogFollower(Timeline(), lambda: {"node-1": log}, index=tmp_path)
    follower.poll()
    time.sleep(0.05)
    with open(log, "a") as f:
        f.write("epoch 7 loss 0.29\n")
    wrote = time.time()
    follower.poll()
    follower.finish()
    ex = excerpt("node-1", log, wrote - 3, wrote + 10, killed_at=wrote)
    last = line(ex, "epoch 7")
    assert last.inferred and last.after is not None and last.before is not None
    assert wrote - 1.0 < last.after <= wrote <= last.before + 0.01 and last.before - last.after < 1.0
    assert last.t == last.before


def test_the_lines_of_one_read_are_placed_by_their_own_samples(tmp_path):
    t = time.time()
    log = tmp_path / "node-1.log"
    log.write_text(glog(t - 100, "[default] Starting worker group"))
    follower = LogFollower(Timeline(), lambda: {"node-1": log}, index=tmp_path)
    follower.poll()
    wrote = {}
    for n in (7, 8):
        with open(log, "a") as f:
            f.write(f"epoch {n} loss 0.29\n")
        wrote[n] = time.time()
        time.sleep(0.03)
        follower.sample()                  # the follower's thread samples the log's size every 10 ms
    follower.poll()                        # one read gets both lines
    follower.finish()
    ex = excerpt("node-1", log, t - 3, t + 10, killed_at=t)
    seven, eight = line(ex, "epoch 7"), line(ex, "epoch 8")
    for ln, w in ((seven, wrote[7]), (eight, wrote[8])):
        assert ln.inferred and ln.after is not None and ln.before is not None
        assert ln.after <= w <= ln.before + 0.01 and ln.before - ln.after < 0.05
    assert seven.before <= eight.after                                      # ordered, not one read's window


def test_a_100mb_log_is_streamed_and_the_agents_failure_past_26mb_is_shown(tmp_path):
    t = time.time() - 3600
    log = tmp_path / "node-0.log"
    chatter = ("epoch 3 batch 1234 loss 0.123456 lr 0.001 " + "x" * 150 + "\n").encode() * 10_000
    with open(log, "wb") as f:
        f.write(glog(t - 100, "[default] Starting worker group").encode())
        while f.tell() < 26_300_000:
            f.write(chatter)
        f.write((TRACEBACK + failed(t + 1)).encode())
        f.write(glog(t + 5, "[default] Starting worker group").encode())
        while f.tell() < 105_000_000:
            f.write(chatter)
    tracemalloc.start()
    try:
        ex = excerpt("node-0", log, t - 3, t + 10, survivor_after=t)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50_000_000                         # the log is 105 MB; a few MB are kept
    assert line(ex, "Worker group FAILED").level == "expected"
    assert line(ex, "Connection closed by peer").level == "expected"
    assert ex.omitted > 500_000 and "line(s) omitted" in ex.summary(t)
    assert all(len(text) < 500 for text in texts(ex))


def test_with_an_index_the_read_starts_near_the_window(tmp_path):
    t = time.time() - 3600
    log = tmp_path / "node-0.log"
    chatter = ("epoch 3 batch 1234 loss 0.123456 lr 0.001 " + "x" * 150 + "\n").encode() * 5_000
    writer = TimesWriter(log)
    with open(log, "wb") as f:
        def write(data: bytes, at: float) -> None:  # as the follower would have seen it, read by read
            f.write(data)
            writer.record(f.tell(), at - 0.1, at)
        f.write(glog(t - 100, "[default] Starting worker group").encode())
        while f.tell() < 26_300_000:
            write(chatter, t - 100 + 99 * f.tell() / 26_300_000)
        write((TRACEBACK + failed(t + 1)).encode(), t + 1)
        while f.tell() < 105_000_000:
            write(chatter, t + 5 + f.tell() / 1_000_000)
    writer.close()
    read_before = _bytes_read()
    ex = excerpt("node-0", log, t - 3, t + 10, survivor_after=t)
    assert _bytes_read() - read_before < 10_000_000   # of 105 MB
    assert line(ex, "Worker group FAILED").level == "expected"
    assert line(ex, "Connection closed by peer").level == "expected"
    assert abs(line(ex, "Connection closed by peer").before - (t + 1)) < 0.002   # the index keeps ms


def _bytes_read() -> int:
    """What this process has read through read(2) so far (Linux)."""
    fields = dict(ln.split(": ") for ln in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"])


def test_the_killed_nodes_last_lines_are_shown_though_they_are_before_the_window(tmp_path):
    t = time.time()
    log = tmp_path / "node-1.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + step(t - 30, 1) + "epoch 1 done\n"
                   + step(t - 20, 2) + "saving to /ckpt/2.pt\n")
    os.utime(log, (t - 19, t - 19))                   # quiet afterwards, until the kill at t
    ex = excerpt("node-1", log, t - 3, t + 10, killed_at=t)
    assert [ln.pulled for ln in ex.lines] == [True] * len(ex.lines) and len(ex.lines) >= 4
    assert "saving to /ckpt/2.pt" in texts(ex) and "epoch 1 done" in texts(ex)
    assert "its last lines before the kill" in ex.summary(t)


def test_the_survivors_failure_is_shown_and_marked_expected(tmp_path):
    t = time.time()
    log = tmp_path / "node-0.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + step(t - 0.5, 41) + "epoch 4 done\n"
                   + TRACEBACK + failed(t + 0.6) + glog(t + 0.6, "[default] Stopping worker group"))
    ex = excerpt("node-0", log, t - 3, t + 10, survivor_after=t)
    assert ex.expected_errors
    for text in ("Traceback (most recent call last)", "Connection closed by peer", "failed (exitcode: 1)",
                 "Worker group FAILED"):
        assert line(ex, text).level == "expected"
    assert line(ex, "Stopping worker group").level == "agent"
    assert line(ex, "epoch 4 done").level == "plain"


def tee(text: str, local_rank: int = 0) -> str:
    """A worker's lines as its agent copies them into the node log (torchrun --tee: elastic_chaos.watchers.sources)."""
    return "".join(f"[default{local_rank}]:{line}\n" for line in text.splitlines())


def test_a_survivors_failure_copied_by_its_agent_is_shown_whole_with_its_prefix_and_marked_expected(tmp_path):
    t = time.time()
    log = tmp_path / "node-0.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + tee(step(t - 0.5, 41) + "epoch 4 done\n")
                   + tee(TRACEBACK) + failed(t + 0.6) + glog(t + 0.6, "[default] Stopping worker group"))
    ex = excerpt("node-0", log, t - 3, t + 10, survivor_after=t)
    for text in ("Traceback (most recent call last)", "loss.backward()", "Connection closed by peer",
                 "failed (exitcode: 1)", "Worker group FAILED"):
        assert line(ex, text).level == "expected"
    assert line(ex, "Traceback").text == "[default0]:[rank0]: Traceback (most recent call last):"
    assert line(ex, "epoch 4 done").level == "plain" and line(ex, "Stopping worker group").level == "agent"


def test_a_worker_printing_that_its_agent_gave_up_is_not_its_agent_in_an_excerpt(tmp_path):
    t = time.time()
    log = tmp_path / "node-0.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + tee(TRACEBACK)
                   + tee("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: (printed)\n")
                   + failed(t + 0.6) + glog(t + 0.6, "[default] Stopping worker group"))
    ex = excerpt("node-0", log, t - 3, t + 10, survivor_after=t)
    assert line(ex, "(printed)").level == "error"                 # an error line, not the agent giving up
    assert line(ex, "Worker group FAILED").level == "expected"    # the failure story goes on to the agent's own


def test_the_killed_nodes_last_lines_copied_by_its_agent_are_shown_with_their_prefix(tmp_path):
    t = time.time()
    log = tmp_path / "node-1.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + tee(step(t - 30, 1) + "epoch 1 done\n")
                   + tee("saving to /ckpt/2.pt\n", local_rank=1))
    os.utime(log, (t - 19, t - 19))
    ex = excerpt("node-1", log, t - 3, t + 10, killed_at=t)
    assert all(ln.pulled for ln in ex.lines)
    assert "[default1]:saving to /ckpt/2.pt" in texts(ex) and "[default0]:epoch 1 done" in texts(ex)


def test_a_survivors_failure_after_a_cut_window_is_pulled_in(tmp_path):
    # a collective that times out long after the fault (NCCL): the window stops at AFTER_MAX_S
    t = time.time() - 600
    log = tmp_path / "node-0.log"
    log.write_text(glog(t - 100, "[default] Starting worker group") + step(t - 0.5, 41)
                   + glog(t + 100, "some agent line long after", MULTI) + TRACEBACK + failed(t + 100.5))
    ex = excerpt("node-0", log, t - 3, t + AFTER_MAX_S, survivor_after=t)
    assert line(ex, "Connection closed by peer").pulled and line(ex, "Worker group FAILED").pulled
    assert line(ex, "Worker group FAILED").level == "expected"
    assert "its failure after the fault" in ex.summary(t)


def test_a_log_that_cannot_be_read_says_so(tmp_path):
    ex = excerpt("node-0", tmp_path / "gone.log", 0.0, 10.0)
    assert ex.lines == () and ex.error is not None and "gone.log" in ex.error


def test_only_torchs_own_glog_lines_carry_a_time():
    t = datetime.datetime(2026, 5, 1, 12, 0, 0, 123456)
    torch_line = glog(t.timestamp(), "[default] Starting worker group").rstrip("\n")
    assert line_time(torch_line, t.date()) == t.timestamp()
    assert line_time("I0501 12:00:00.123456 4242 train.py:88] epoch 3 done", t.date()) is None   # a script's absl
    assert line_time("I0230 12:00:00.123456 4242 torch/x.py:1] no such day", t.date()) is None


def test_report_html_shows_inferred_times_and_their_window(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(RUNS / "kill-node-replaced", folder)
    html = render_folder(folder, png=False).html.read_text()
    excerpts = html[html.index("Logs around each fault"):]
    assert 'class="t inferred" title="time inferred: written between +' in excerpts
    assert "times inferred for" in excerpts
    assert "No log lines in this window from node-0" not in excerpts
