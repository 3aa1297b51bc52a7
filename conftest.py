"""The repository's own test sessions (tests/ and scenarios/): every report a test makes through the
pytest plugin is read back and each of its sentences checked (tests/sentences.py); a report that says
something its timeline does not fails the test that made it. Not part of what users install."""
from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "tests"))

from sentences import problems  # noqa: E402

from elastic_chaos.pytest_plugin import RUNS_KEY  # noqa: E402


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    result = yield   # a test that failed already says why; its report is not read
    found = [f"{run.report_dir}: {p}" for run in item.stash.get(RUNS_KEY, []) for p in problems(run.report_dir)]
    if found:
        raise AssertionError("the report says what its timeline does not (tests/sentences.py):\n  "
                             + "\n  ".join(found))
    return result
