"""One piece of tuning advice: the phase it explains, the setting responsible, what it cost, and
the change to make, as flags ``elastic-chaos run`` accepts, with what it would have saved."""
from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    fault_index: int
    phase: str
    setting: str | None
    """The setting responsible, or None for a breakdown no setting governs."""
    cost_s: float
    text: str
    change: tuple[str, ...] = ()
    """The change to make, as ``elastic-chaos run`` flags (``--rdzv-preset fast``); () where no flag of
    the toolkit's governs it (a script's own interval, torch's fixed shutdown wait, a breakdown).
    tests/test_advice_changes.py feeds every one back through the CLI."""
    torchrun: str | None = None
    """The same change for a job launched by hand (``--rdzv-conf k=v``, an environment variable)."""
    saved_s: float | None = None
    """About how many seconds of this run the change would have saved (None: not estimable)."""

    def lead(self) -> str | None:
        """The change in one line, to lead the finding with (None: no change to paste)."""
        if not self.change:
            return None
        out = f"change: {shlex.join(self.change)}"
        if self.torchrun:
            out += f" (by hand: {self.torchrun})"
        if self.saved_s is not None:
            out += f"; would have saved about {self.saved_s:.1f} s in this run"
        return out
