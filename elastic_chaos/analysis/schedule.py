"""The world sizes a run's committed history trained at, leg by leg: what a clean reference replays.

A job that lost a node and was not given a replacement trains on at a smaller world,
and a DDP step at another world size averages other gradients: its final state is not
a clean run's at full size. It is, bitwise on CPU/gloo, the state of a clean run that
trains the same legs: world size W1 from step 0 to the save the job next resumed from,
then W2 from that save on, and so on (the reference trainer's step depends only on the
checkpoint it resumed from and the world size; ``tests/test_final_state_runs.py``
shows it). :func:`trained_schedule` reads those legs from the timeline: each step of
the committed history with the world size that trained it, as the exactly-once account
(elastic_chaos.analysis.samples) rebuilds that history (a resume from step S drops the
steps after S that were trained before it). :class:`Reference` is the clean run
``--compare-final`` made from them, and its :meth:`~Reference.describe` says which.
"""
from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from elastic_chaos.errors import ChaosError
from elastic_chaos.events import CheckpointEv, Event, ProgressEv


class ScheduleUnknown(ChaosError):
    """The timeline does not say at which world size every step of the committed history trained."""


@dataclass(frozen=True)
class Leg:
    """Steps ``start`` (exclusive: the save it resumed from, 0 for a fresh start) to ``end`` at ``world`` ranks."""

    world: int
    start: int
    end: int

    def to_json(self) -> dict[str, int]:
        return {"world": self.world, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, raw: Any) -> Leg:
        """A leg from report.json; ValueError for what is not one."""
        if not isinstance(raw, dict):
            raise ValueError(f"a leg is an object, not {type(raw).__name__}")
        values = [v for k in ("world", "start", "end")
                  if isinstance(v := raw.get(k), int) and not isinstance(v, bool) and v >= 0]
        if len(values) != 3:
            raise ValueError(f"a leg's world, start and end are counts: {raw!r}")
        return cls(*values)


def legs_text(legs: tuple[Leg, ...]) -> str:
    """``world size 3 to step 30, then 2 from its step-30 save to step 60``."""
    head, *rest = legs
    parts = [f"world size {head.world} to step {head.end}"]
    parts += [f"{leg.world} from its step-{leg.start} save to step {leg.end}" for leg in rest]
    return ", then ".join(parts)


def trained_schedule(events: Iterable[Event], final: int) -> tuple[Leg, ...]:
    """The legs of the committed history up to step ``final``, in order, adjacent steps at one world size
    merged (a resume at the same size ends where an uninterrupted run would). ScheduleUnknown where a step
    of 1..``final`` has no world size in the timeline, or the world changed at a step no one resumed from."""
    world: dict[int, int] = {}
    resumed: set[int] = set()
    for e in sorted(events, key=lambda ev: ev.t):
        if e.type == CheckpointEv.LOADED:
            at = e.data.step or 0
            resumed.add(at)
            for s in [s for s in world if s > at]:
                del world[s]
        elif e.type == ProgressEv.STEP and e.data.world_size is not None and e.data.step <= final:
            world[e.data.step] = int(e.data.world_size)
    missing = [s for s in range(1, final + 1) if s not in world]
    if missing:
        raise ScheduleUnknown(f"the timeline does not say at which world size step {missing[0]} of the committed "
                              f"history trained ({len(missing)} of its {final} steps unknown)")
    legs = [Leg(world[1], 0, 1)]
    for s in range(2, final + 1):
        if world[s] == legs[-1].world:
            legs[-1] = Leg(legs[-1].world, legs[-1].start, s)
            continue
        if s - 1 not in resumed:
            raise ScheduleUnknown(f"the world size changed from {legs[-1].world} to {world[s]} after step {s - 1}, "
                                  "which the job did not resume from")
        legs.append(Leg(world[s], s - 1, s))
    return tuple(legs)


class ReferenceKind(enum.Enum):
    """Which clean run ``--compare-final`` compared the job with."""

    CLEAN_RUN = "clean-run"
    """One uninterrupted run at one world size (the job's world never changed)."""
    SCHEDULE_REPLAY = "schedule-replay"
    """The faulted run's legs replayed without a fault, each resuming from the previous leg's save."""
    CLEAN_TWIN = "clean-twin"
    """A user's script run again without a fault, same command and arguments, to its own end (its one leg's
    ``end`` is the last step the faulted run reported; 0 where it reports none)."""


@dataclass(frozen=True)
class Reference:
    """The clean run a final state was compared with: its kind and the legs it trained."""

    kind: ReferenceKind
    legs: tuple[Leg, ...]

    @classmethod
    def of(cls, legs: tuple[Leg, ...]) -> Reference:
        """A clean run for one leg, a schedule replay for several."""
        return cls(ReferenceKind.CLEAN_RUN if len(legs) == 1 else ReferenceKind.SCHEDULE_REPLAY, legs)

    @property
    def final(self) -> int:
        return self.legs[-1].end

    def describe(self) -> str:
        """``reference: a clean run ...`` or ``reference: a clean replay of the faulted run's schedule: ...``."""
        if self.kind is ReferenceKind.CLEAN_TWIN:
            return (f"reference: the script's clean twin, the same command and arguments run without a fault to its "
                    f"own end at world size {self.legs[0].world}")
        if self.kind is ReferenceKind.CLEAN_RUN:
            return (f"reference: a clean run to step {self.final} at world size {self.legs[0].world}, same trainer "
                    "arguments and seed")
        return (f"reference: a clean replay of the faulted run's schedule: {legs_text(self.legs)}, same trainer "
                "arguments and seed")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "legs": [leg.to_json() for leg in self.legs], "summary": self.describe()}

    @classmethod
    def from_json(cls, raw: Any) -> Reference:
        """report.json's ``final_state.reference``; ValueError for what is not one."""
        if not isinstance(raw, dict) or not isinstance(raw.get("legs"), list) or not raw["legs"]:
            raise ValueError("a reference is an object with its legs")
        return cls(ReferenceKind(raw.get("kind")), tuple(Leg.from_json(leg) for leg in raw["legs"]))
