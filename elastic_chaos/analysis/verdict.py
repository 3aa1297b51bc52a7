"""A run's verdict: the checks of its hypothesis, each named, each with its reason.

A hypothesis records checks as it goes (``verdict.require(ok, reason, check=...)``);
the verdict passed when no check failed. Checks have short names
(``bounded-loss``, ``exactly-once``) so code that expects a hypothesis to fail
(a scenario showing that a naive sampler trains samples twice) asks which check
failed instead of matching prose; the reasons are for people.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

STEADY_CHECK = "steady-state"
"""The check a run makes before its fault: the job is steady (elastic_chaos.hypotheses.steady)."""
DISK_CHECK = "disk-full"
"""The check a run fails when a disk it keeps its evidence on ran out of room (elastic_chaos.runner.disk)."""
TOOLKIT_CHECKS = frozenset({"watcher", "cleanup", "toolkit", DISK_CHECK})
"""Checks that judge the toolkit itself (a watcher died, cleanup failed), never the hypothesis."""
JOB_FINISHED_CHECK = "job-finished"
"""The check a run fails when the job ended on its own (every node exited 0) before its fault
could be judged: it finished training before the fault, or before the hypothesis' wait ended."""
INTERRUPTED_CHECK = "interrupted"
"""The check a run fails when Ctrl-C or SIGTERM stopped it (a cancelled CI job): not a verdict on
the hypothesis."""
USAGE_CHECK = "usage"
"""The check of a run stopped by a bad input or setup found only once it had begun (a file that
cannot be read, a missing binary): no run was made, and the command exits 2."""


class Outcome(str, enum.Enum):
    """What a run came to, and the exit code ``elastic-chaos run`` says it with."""

    PASSED = "passed"
    """The hypothesis held (exit 0)."""
    FAILED = "failed"
    """The hypothesis did not hold (exit 1)."""
    NOT_STEADY = "not_steady"
    """The job was not steady before the fault (crashed, restarted, not training at its size):
    no fault was injected, no experiment was made (exit 3)."""
    JOB_FINISHED = "job_finished"
    """The job ended on its own (its workers finished training, every node exited 0) before the
    fault could be judged: no experiment was made (exit 3, as for a job that was not steady)."""
    INTERRUPTED = "interrupted"
    """Ctrl-C or SIGTERM stopped the run before it ended (a cancelled CI job): it says nothing about the
    hypothesis, and an audit keeps it out of pass rates (exit 130)."""
    TOOLKIT_ERROR = "toolkit_error"
    """The toolkit itself failed (a watcher died, cleanup failed): the run says nothing about the
    job (exit 4)."""
    USAGE_ERROR = "usage_error"
    """A bad input or setup was found once the run had begun: no run was made (exit 2)."""

    @property
    def exit_code(self) -> int:
        return {Outcome.PASSED: 0, Outcome.FAILED: 1, Outcome.USAGE_ERROR: USAGE_EXIT, Outcome.NOT_STEADY: 3,
                Outcome.JOB_FINISHED: 3, Outcome.TOOLKIT_ERROR: 4, Outcome.INTERRUPTED: INTERRUPTED_EXIT}[self]

    @property
    def judges_hypothesis(self) -> bool:
        """Whether the run is a verdict on the hypothesis (passed or failed): a run that was not
        steady, that the toolkit failed, or that a usage error stopped says nothing about it, and
        an audit keeps it out of pass rates."""
        return self in (Outcome.PASSED, Outcome.FAILED)

    @property
    def word(self) -> str:
        """The outcome in a word or two, as every rendering titles the run (CLI, summary.md,
        report.html, ``report DIR``)."""
        return self.value.replace("_", " ").upper()

    def describe(self) -> str:
        return {Outcome.PASSED: "PASSED", Outcome.FAILED: "FAILED",
                Outcome.NOT_STEADY: "NOT STEADY (no experiment: the job was not steady before the fault)",
                Outcome.JOB_FINISHED: "JOB FINISHED (no experiment: the job ended on its own before its fault "
                                      "could be judged)",
                Outcome.INTERRUPTED: "INTERRUPTED (Ctrl-C or SIGTERM stopped the run: it says nothing about the "
                                     "hypothesis)",
                Outcome.TOOLKIT_ERROR: "TOOLKIT ERROR (the run says nothing about the job)",
                Outcome.USAGE_ERROR: "USAGE ERROR (a bad input found once the run had begun: not a run)"}[self]


USAGE_EXIT = 2
"""A usage or setup error: bad input, found before anything started (or mid-run: then no run)."""
INTERRUPTED_EXIT = 130

_PREFIXES: dict[str, bool | None] = {"ok": True, "FAILED": False, "not checked": None}
"""How a check's outcome begins its line."""


@dataclass(frozen=True)
class Check:
    """One check of a hypothesis: ``ok`` True or False, or None when it could not be made."""

    name: str
    ok: bool | None
    reason: str

    def line(self) -> str:
        prefix = next(p for p, ok in _PREFIXES.items() if ok is self.ok)
        return f"{prefix}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "reason": self.reason}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Check:
        ok = raw.get("ok")
        return cls(str(raw.get("name", "")), ok if isinstance(ok, bool) else None, str(raw.get("reason", "")))

    @classmethod
    def from_line(cls, line: str, passed: bool) -> Check:
        """A reason line of a verdict written before checks had names ("ok: ...",
        "FAILED: ...", "not checked: ..."); a line without a prefix takes the verdict's outcome."""
        for prefix, ok in _PREFIXES.items():
            if line.startswith(prefix + ": "):
                return cls("hypothesis", ok, line[len(prefix) + 2:])
        return cls("hypothesis", passed, line)


@dataclass
class Verdict:
    """The checks of one run, in the order they were made."""

    checks: list[Check] = field(default_factory=list)

    def require(self, ok: bool, reason: str, *, check: str = "hypothesis") -> bool:
        """Record one check; a failing one fails the verdict. Returns ``ok``."""
        self.checks.append(Check(check, bool(ok), reason))
        return bool(ok)

    def skip(self, reason: str, *, check: str) -> None:
        """Record a check that could not be made (and why); it does not fail the verdict."""
        self.checks.append(Check(check, None, reason))

    def fail(self, reason: str, *, check: str = "run") -> None:
        self.require(False, reason, check=check)

    @property
    def passed(self) -> bool:
        return not any(c.ok is False for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        """Every check as one line ("ok: ...", "FAILED: ...", "not checked: ...")."""
        return [c.line() for c in self.checks]

    def failed_checks(self) -> set[str]:
        """The names of the checks that failed."""
        return {c.name for c in self.checks if c.ok is False}

    @property
    def outcome(self) -> Outcome:
        """A failed usage check means no run was made; a failed toolkit check makes the run the
        toolkit's error whatever else failed; a failed steady state means no experiment was made;
        otherwise the hypothesis passed or failed."""
        failed = self.failed_checks()
        if USAGE_CHECK in failed:
            return Outcome.USAGE_ERROR
        if INTERRUPTED_CHECK in failed:
            return Outcome.INTERRUPTED
        if failed & TOOLKIT_CHECKS:
            return Outcome.TOOLKIT_ERROR
        if STEADY_CHECK in failed:
            return Outcome.NOT_STEADY
        if JOB_FINISHED_CHECK in failed:
            return Outcome.JOB_FINISHED
        return Outcome.FAILED if failed else Outcome.PASSED

    def to_json(self) -> dict[str, Any]:
        """report.json's ``verdict``: ``passed``, ``outcome``, ``reasons`` (lines) and ``checks``."""
        return {"passed": self.passed, "outcome": self.outcome.value, "reasons": self.reasons,
                "checks": [c.to_json() for c in self.checks]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Verdict | None:
        """report.json's ``verdict`` read back; None where the run reached none (no
        check made and not passed, as report.json writes "no verdict was reached", or
        ``passed`` null: a run that never finished). A verdict written before checks
        had names is read from its reason lines."""
        passed = raw.get("passed")
        if not isinstance(passed, bool):
            return None
        checks = raw.get("checks")
        if isinstance(checks, list):
            found = [Check.from_json(c) for c in checks if isinstance(c, dict)]
        else:
            found = [Check.from_line(str(r), passed) for r in raw.get("reasons") or []]
        if not found and not passed:
            return None
        return cls(found)

    @classmethod
    def failed(cls, reason: str, *, check: str = "run") -> Verdict:
        v = cls()
        v.fail(reason, check=check)
        return v


NO_VERDICT_WORD = "NO VERDICT"
"""How a run that reached no verdict (it never finished) is titled."""


def verdict_word(verdict: Verdict | None) -> str:
    """The word every rendering titles a run with: its outcome's, or NO VERDICT."""
    return verdict.outcome.word if verdict is not None else NO_VERDICT_WORD
