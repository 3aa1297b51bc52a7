"""One piece of tuning advice: the phase it explains, the setting responsible, what it cost."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    fault_index: int
    phase: str
    setting: str | None
    """The setting responsible, or None for a breakdown no setting governs."""
    cost_s: float
    text: str
