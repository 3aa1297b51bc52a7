"""glog timestamps (torchrun's agents, NCCL's watchdog): no year and no zone in the line."""
from __future__ import annotations

import datetime


def glog_time(month: int, day: int, hh: int, mm: int, ss: int, us: int,
              today: datetime.date | None = None, tz: datetime.tzinfo | None = None) -> float:
    """A glog timestamp (no year, no zone) -> epoch seconds: written in ``tz`` (None: this
    machine's local time; pods log in UTC), year from ``today`` (in that zone)."""
    today = today or datetime.datetime.now(tz).date()
    year = today.year - 1 if (month, day) > (today.month, today.day) else today.year
    return datetime.datetime(year, month, day, hh, mm, ss, us, tzinfo=tz).timestamp()
