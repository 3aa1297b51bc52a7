"""Bounded polls: every loop that waits for a condition ends, and says what it waited for.

Built on tenacity (its stop and wait policies), so no module writes its own
``while time.monotonic() < deadline`` loop: ``until`` raises when the time is
up, ``eventually`` returns the last (falsy) answer instead.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_delay, wait_fixed

from elastic_chaos.errors import ChaosError

T = TypeVar("T")


class WaitTimeout(ChaosError):
    """A bounded poll ran out of time; ``what`` says what it waited for."""

    def __init__(self, what: str, waited_s: float, last: object) -> None:
        super().__init__(f"gave up after {waited_s:g}s waiting for {what} (last answer: {last!r})")
        self.what, self.waited_s, self.last = what, waited_s, last


def _last_result(state: RetryCallState) -> object:
    return state.outcome.result() if state.outcome is not None else None


def eventually(condition: Callable[[], T], *, timeout_s: float, interval_s: float = 0.5) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something truthy or
    ``timeout_s`` passed; returns that answer, or the last falsy one. Exceptions
    propagate at once (a poll does not hide errors)."""
    retrying = Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(interval_s),
                        retry=retry_if_result(lambda answer: not answer),
                        retry_error_callback=_last_result, reraise=True)
    result: T = retrying(condition)
    return result


def until(condition: Callable[[], T], *, what: str, timeout_s: float, interval_s: float = 0.5) -> T:
    """Like ``eventually``, but raises WaitTimeout naming ``what`` when the time is up."""
    answer = eventually(condition, timeout_s=timeout_s, interval_s=interval_s)
    if not answer:
        raise WaitTimeout(what, timeout_s, answer)
    return answer
