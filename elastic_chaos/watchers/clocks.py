"""One clock per run: a node whose clock differs from the runner's has its log times placed on the runner's.

A node's lines carry its own clock's time (torch's glog stamp, an elastic_chaos.trainer.progress ``t``, an NCCL
watchdog's); every line also has a write window on the runner's clock (elastic_chaos.watchers.line_times:
after the follower's last look without it, by the look that found it). A stamp ``s`` of a line written
in [after, by] says the node's clock was ahead of the runner's by at least ``s - by`` and at most
``s - after`` (a line is stamped before it is written). Each node's offset is held within the
intersection of its lines' bounds. Where that interval keeps clear of zero by SKEW_S or more (a host
whose clock is off: a day, or five seconds), the node's stamped times are moved onto the runner's
clock by the bound nearest zero (never past the truth), and the run records the offset
(``runner/clock_offset``) so the report says what it applied. A node on the runner's own clock (every
local node) has an interval that holds zero: nothing is moved. The lines of a log's first read, if it
already held them, have no lower bound (``after``): they cannot show a clock behind the runner's, and
are moved only once a later line has shown it.

Only the lower bound is sure: a line cannot be seen before it is stamped. The upper bound assumes a
line is written when it is stamped, and a line held back on its way (a frozen machine's container
runtime hands over, at the thaw, a line stamped before the freeze) breaks it: its ``s - after`` lies
below the truth by as long as it was held. Such a line shows itself where its upper bound falls below
the node's lower bound, and its upper bound is dropped; a lower bound that rises above the upper bound
shows an earlier line was held, and the upper bound is forgotten.

Without it, a runner a day ahead called a recovered run a timeout, and one 5 s behind reported a
5 s ``exit`` phase and dozens of false notes. Without the held-line rule, a node frozen for 23 s on a
Kubernetes cluster was 'corrected' by -23 s, its last step before the freeze moved past the thaw, and
the run reported a split brain that never happened.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

SKEW_S = 2.0
"""The least offset corrected: smaller ones are within what a log read late (a loaded machine, a pod's
log streamed over the network) can seem to show, and are left alone."""
RESAY_S = 0.25
"""A correction is recorded again when it moves by this much (the bounds tighten as lines come)."""


@dataclass
class NodeClock:
    """What one node's stamped lines say of its clock against the runner's."""

    lower: float = -math.inf
    upper: float = math.inf
    applied: float = 0.0
    """The offset its stamps are corrected by now (0: none)."""

    def observe(self, stamp: float, after: float | None, by: float) -> bool:
        """Take in one stamped line written in [after, by] (runner's clock); returns whether the
        correction changed enough to be recorded again."""
        self.lower = max(self.lower, stamp - by)
        if self.lower > self.upper:
            self.upper = math.inf        # an earlier line was held on its way: its bound was not one
        if after is not None and stamp - after >= self.lower:
            self.upper = min(self.upper, stamp - after)
        # else: this line was held on its way (stamped well before the look that did not see it)
        wanted = self.lower if self.lower >= SKEW_S else self.upper if self.upper <= -SKEW_S else 0.0
        if abs(wanted - self.applied) < (RESAY_S if self.applied else 1e-9):
            return False
        self.applied = wanted
        return True

    def place(self, stamp: float) -> float:
        """A stamp of this node's clock on the runner's."""
        return stamp - self.applied
