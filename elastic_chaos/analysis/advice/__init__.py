"""Tuning advice, measured from the run: each finding names the setting that held a recovery back,
the seconds it cost in this run and the change that would buy them back (rendezvous: keep-alive,
last call, retraining, restart; the workers' side; the checkpoint volume). The reports render the
findings; they compute none."""
from __future__ import annotations

from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.advice.rendezvous import advise

__all__ = ["Finding", "advise"]
