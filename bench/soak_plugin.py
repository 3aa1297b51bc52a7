"""A pytest plugin for `make soak` (bench.soak): each test phase's outcome as a JSON line, by node id.

``pytest -p bench.soak_plugin --soak-log FILE`` appends one line per test phase
(``{"nodeid", "when", "outcome"}``). Under pytest-xdist the workers' reports
reach the controller's ``pytest_runtest_logreport``: only the controller (or a
run without workers) writes, so each phase is one line.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--soak-log", type=Path, default=None, help="append each test phase's outcome here (JSON lines)")


def pytest_configure(config: Any) -> None:
    path = config.getoption("--soak-log")
    if path is not None and not hasattr(config, "workerinput"):   # an xdist worker forwards to the controller
        config.pluginmanager.register(OutcomeLog(path), "soak-outcome-log")


class OutcomeLog:
    """Appends each test phase's outcome to ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_runtest_logreport(self, report: Any) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}) + "\n")
