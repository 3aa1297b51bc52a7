"""Shared settings of the scenario catalog.

Where rendezvous timing is not what a scenario is about, it uses a shorter
``last_call_timeout`` than torch's 30 s so the catalog stays fast; the
scenarios about detection keep torch's defaults for what they measure.
"""
from __future__ import annotations

CHECKPOINT_EVERY = 20
STEADY = 50             # steady state: between two checkpoints, so faults cost real progress
FAST_RDZV = {"last_call_timeout": 3}
