"""Terminal progress: plain lines without control characters when not a TTY, a live status line on one."""
from __future__ import annotations

import io
import time

from elastic_chaos.cli.live_console import ConsoleProgress
from elastic_chaos.events import ProgressEv, RunnerEv, Timeline
from elastic_chaos.events.progress_events import Step
from elastic_chaos.events.runner_events import Phase


def step(tl: Timeline, n: int, ws: int = 2) -> None:
    tl.emit(ProgressEv.STEP, "node-0", Step(rank=0, step=n, world_size=ws))


def test_not_a_tty_gets_plain_lines_and_a_still_line_when_quiet():
    tl, out = Timeline(), io.StringIO()          # StringIO.isatty() is False, like a CI log
    progress = ConsoleProgress(tl, out, step_every_s=60.0, quiet_after_s=0.6)
    tl.emit(RunnerEv.PHASE, None, Phase(phase="recovering", fault="kill-node"))
    for n in range(1, 6):
        step(tl, n)
    time.sleep(1.5)
    tl.emit(RunnerEv.PHASE, None, Phase(phase="finished"))
    text = out.getvalue()
    assert not any(c in text for c in "\r\x1b"), "no control characters in CI logs"
    assert "phase: recovering (fault=kill-node)" in text
    assert text.count("training: step") == 1     # at most one step line per step_every_s
    assert "still in phase recovering: last step 5 at world size 2" in text
    assert not progress._ticker.is_alive()       # the finished phase stops the ticker


def test_a_tty_gets_a_status_line_redrawn_in_place():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tl, out = Timeline(), Tty()
    progress = ConsoleProgress(tl, out)
    tl.emit(RunnerEv.PHASE, None, Phase(phase="steady_state", target_step=50))
    step(tl, 42)
    time.sleep(0.8)
    progress.close()
    text = out.getvalue()
    assert "\r\x1b[K" in text
    assert "phase steady_state | step 42 at world size 2" in text
    assert "training: step" not in text          # the status line shows the step instead
    assert text.endswith("\r\x1b[K")             # closing clears the status line
