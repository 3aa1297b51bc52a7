"""Time dilation for the rendezvous scale harness: more agents than this machine can run at full speed.

A thousand torchrun agents run on a thousand machines; here they share two cores. Past a few hundred, the
harness' CPU -- not torch -- sets the pace, and torch's timers (keep-alive, heartbeat expiry, last call)
fire on agents that were merely waiting for a core. DieCast's answer (Gupta et al., NSDI 2008, "DieCast:
testing distributed systems with an accurate scale model") is to slow every clock the system sees by a
time dilation factor ``d``: a second of *perceived* time lasts ``d`` real seconds, so each agent gets ``d``
times the CPU per perceived second, and the store (a single core on a real cluster) is held to ``1/d``
of one core (:mod:`bench.rdzv.throttle`) so that it is *not* made faster with it.

:func:`install` dilates, in a host process, every clock torch's rendezvous and agent loop read:

- ``dynamic_rendezvous``: ``time.monotonic`` (deadlines, the sync cache), ``time.sleep``, and
  ``datetime.now`` (the heartbeats and the last-call deadline written into the shared state);
- ``rendezvous.utils``: ``time.sleep`` in ``_delay`` (backoff), and ``_PeriodicTimer``'s interval (the
  keep-alive timer), made ``d`` times longer;
- ``agent.server.api``: ``time.sleep(monitor_interval)`` and its ``time.monotonic``/``time.time``.

torch's code runs unchanged; only the clocks it reads are slowed. Every process of one harness shares the
``epoch`` (a real ``time.time()``), so perceived wall times agree across processes: a heartbeat written
by one and read by another compares as on one machine. What is *not* dilated: timeouts inside the C++
TCPStore client and etcd's HTTP timeouts (real seconds are longer than perceived ones, so these only get
more lenient), and the network (loopback). With ``d == 1`` nothing is patched.
"""
from __future__ import annotations

import time as _time
import types
from datetime import datetime, timedelta, tzinfo
from typing import Any


class Dilation:
    """Perceived time: the real time since ``epoch`` divided by ``factor`` (1: real time)."""

    def __init__(self, factor: float = 1.0, epoch: float | None = None) -> None:
        if not factor >= 1.0:
            raise ValueError(f"time dilation {factor!r}: it must be >= 1 (1 = real time)")
        self.factor = float(factor)
        self.epoch = _time.time() if epoch is None else float(epoch)
        self._mono0 = _time.monotonic()

    def time(self) -> float:
        return self.epoch + (_time.time() - self.epoch) / self.factor

    def monotonic(self) -> float:
        return self._mono0 + (_time.monotonic() - self._mono0) / self.factor

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            _time.sleep(seconds * self.factor)

    def sleep_until(self, t: float) -> None:
        """Until perceived wall time ``t``."""
        self.sleep(t - self.time())

    def real_s(self, seconds: float) -> float:
        """Real seconds that ``seconds`` of perceived time take."""
        return seconds * self.factor

    def perceived_s(self, real_seconds: float) -> float:
        return real_seconds / self.factor

    def now(self, tz: tzinfo | None = None) -> datetime:
        return datetime.fromtimestamp(self.time(), tz)


CLOCK = Dilation()
"""This process' clock: real time until :func:`install` dilates it."""


def _time_module(clock: Dilation) -> types.ModuleType:
    """A stand-in for the ``time`` module whose clocks and sleep are ``clock``'s; the rest is time's own."""
    shim = types.ModuleType("time")
    shim.__dict__.update({k: v for k, v in vars(_time).items() if not k.startswith("__")})
    shim.time = clock.time  # type: ignore[attr-defined]
    shim.monotonic = clock.monotonic  # type: ignore[attr-defined]
    shim.perf_counter = clock.monotonic  # type: ignore[attr-defined]
    shim.sleep = clock.sleep  # type: ignore[attr-defined]
    return shim


def _datetime_class(clock: Dilation) -> type[datetime]:
    """``datetime`` whose ``now()`` reads ``clock``; its instances are plain datetimes (they are pickled
    into the shared rendezvous state)."""

    class DilatedDatetime(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> datetime:  # type: ignore[override]
            return clock.now(tz)

        @classmethod
        def utcnow(cls) -> datetime:  # type: ignore[override]
            return clock.now(None)

    return DilatedDatetime


def install(factor: float, epoch: float | None = None) -> Dilation:
    """Dilate this process' clocks (see the module docstring); returns the clock. Once per process. ``epoch``:
    the one every process of the job shares (None: now, for a process alone)."""
    global CLOCK
    clock = Dilation(factor, epoch)
    CLOCK = clock
    if clock.factor == 1.0:
        return clock
    from torch.distributed.elastic.agent.server import api
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous, utils

    shim = _time_module(clock)
    dynamic_rendezvous.time = shim  # type: ignore[attr-defined]
    dynamic_rendezvous.datetime = _datetime_class(clock)  # type: ignore[attr-defined]
    utils.time = shim  # type: ignore[attr-defined]
    api.time = shim  # type: ignore[attr-defined]
    timer = utils._PeriodicTimer

    class DilatedTimer(timer):  # type: ignore[misc,valid-type]
        def __init__(self, interval: timedelta, function: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(interval * clock.factor, function, *args, **kwargs)

    dynamic_rendezvous._PeriodicTimer = DilatedTimer  # type: ignore[attr-defined]
    return clock


def current() -> Dilation:
    """This process' clock (the module global, read at call time: :func:`install` replaces it)."""
    return CLOCK
