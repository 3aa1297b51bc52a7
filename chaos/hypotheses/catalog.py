"""The catalog: importing this module registers every hypothesis the toolkit ships
(``elastic-chaos faults`` lists them; ``elastic-chaos run NAME`` and the scenarios in
``scenarios/`` run them). A new hypothesis is one decorated function in one of these
modules (or a new module imported here)."""
from __future__ import annotations

from chaos.hypotheses import growth, losses, silent
from chaos.hypotheses.api import HYPOTHESES

__all__ = ["HYPOTHESES", "growth", "losses", "silent"]
