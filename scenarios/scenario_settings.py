"""Shared settings of the scenario catalog.

Where rendezvous timing is not what a scenario is about, it uses a shorter
``last_call_timeout`` than torch's 30 s so the catalog stays fast; the
scenarios about detection keep torch's defaults for what they measure.

A scenario that loses a node for good also takes the fast preset's keep-alive
(``LOSS_RDZV``): with torch's 5 s x 3 the survivors wait in the rendezvous for
the dead node's last heartbeat to age 15 s, which was 14-18 s of every such
scenario's recovery (report.json ``phases.rendezvous``, measured on the local
platform). Scenarios where a node or the store goes silent keep torch's
keep-alive: a hung etcd or a freeze that thaws must be ridden out, and a 4 s
keep-alive would declare those nodes dead; a partition or freeze that lasts is
found out by the survivors' collective timeout whatever the keep-alive (with
4 s the store dropped the silent node after 3.3-4.1 s and the survivors still
waited for their 10 s timeout: the runs took as long).
"""
from __future__ import annotations

from elastic_chaos.spec import PRESETS, Preset

CHECKPOINT_EVERY = 20
CADENCE = {"checkpoint_every": CHECKPOINT_EVERY, "steady_steps": 30}
"""Checkpoints every 20 steps; the fault lands at step 30, between two of them, so it costs real
progress (10 steps). The hypotheses' own default, 50, spends 2 s more per scenario to the same end."""
FAST_RDZV = {"last_call_timeout": 3}
LOSS_RDZV = {knob: getattr(PRESETS["fast"], knob) for knob in Preset.RDZV_KNOBS}
"""The fast preset's rendezvous knobs: a dead node leaves after 1 s x 4, a shrunken world starts 1 s later."""

STORAGE_PLATFORMS = ("local", "kubernetes")
STORAGE_REASON = ("the storage layer is a FUSE mount made on this machine over the job's checkpoint folder: the "
                  "local platform's, or the local cluster's shared folder")


def require_storage_layer() -> None:
    """Skip with the reason a storage mount cannot be made here (no /dev/fuse, not root); under
    CI=true that is a failure: CI provides root and /dev/fuse, so a skip would hide a regression."""
    import os

    import pytest

    from elastic_chaos.storagefs import unavailable
    reason = unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the storage scenarios cannot run: {reason} -- CI must provide root and /dev/fuse")
    pytest.skip(reason)
