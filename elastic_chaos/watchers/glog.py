"""glog timestamps (torchrun's agents, NCCL's watchdog): no year and no zone in the line.

The one matcher of torch's glog header lives here, so the LogFollower (agent events)
and the report's log excerpts (each line's time) read a line the same way.
"""
from __future__ import annotations

import datetime
import re

GLOG = re.compile(r"^([IWEF])(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) +(\d+) [^\]]*\] ?(.*)$")
"""The header torch's elastic logger writes: ``I1122 08:18:31.027000 2869 path:line] msg``
(groups: severity, month, day, hh, mm, ss, microseconds, pid, message)."""


def glog_time(month: int, day: int, hh: int, mm: int, ss: int, us: int,
              today: datetime.date | None = None, tz: datetime.tzinfo | None = None) -> float:
    """A glog timestamp (no year, no zone) -> epoch seconds: written in ``tz`` (None: this
    machine's local time; pods log in UTC), year from ``today`` (in that zone)."""
    today = today or datetime.datetime.now(tz).date()
    year = today.year - 1 if (month, day) > (today.month, today.day) else today.year
    return datetime.datetime(year, month, day, hh, mm, ss, us, tzinfo=tz).timestamp()


def glog_stamp(m: re.Match[str], today: datetime.date | None = None,
               tz: datetime.tzinfo | None = None) -> float | None:
    """The time of a ``GLOG`` match (see ``glog_time``); None for a date no calendar has (0230)."""
    month, day, hh, mm, ss, us = (int(m[i]) for i in range(2, 8))
    try:
        return glog_time(month, day, hh, mm, ss, us, today, tz)
    except ValueError:
        return None
