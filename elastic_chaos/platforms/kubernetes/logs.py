"""Follow a worker pod's log into ``nodes/<pod>.log``, across restarts and re-creations.

The same file the local platform writes per node, so the LogFollower (progress
and agent lines) works unchanged on a cluster. A pod's log is read through the
API server (``pods/log?follow=true&timestamps=true``), which proxies the
kubelet. The stream ends whenever the container does, the pod is deleted, or
the connection breaks; the follower then looks at what the pod is now:

- the same container instance (the connection broke): follow again, skipping
  lines whose kubelet timestamp was already written (no duplicates);
- the container restarted in the same pod: first the rest of the old
  instance's log (``previous=true``), then the new instance;
- a new pod with the same name (the controller replaced it): a marker line,
  then the new pod's log;
- no pod: wait for one (bounded by ``stop()``).
"""
from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from elastic_chaos.platforms.kubernetes.watch import _close, _shutdown, api_status, is_transient, iter_lines

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Instance:
    """One run of the worker container: pod uid and its container's restart count."""

    uid: str
    restarts: int
    started: bool
    """The container has started (its log can be read)."""


def parse_ts(stamp: str) -> int | None:
    """A kubelet RFC3339(Nano) timestamp -> nanoseconds since the epoch (None if not one)."""
    if not stamp.endswith("Z") or "T" not in stamp:
        return None
    main, _, frac = stamp[:-1].partition(".")
    try:
        whole = datetime.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
        nanos = int((frac or "0").ljust(9, "0")[:9])
    except ValueError:
        return None
    return int(whole.timestamp()) * 1_000_000_000 + nanos


class PodLogFollower:
    """A thread appending one pod name's container output to ``path``.

    ``current()`` says what the pod is now (None: no such pod). ``stop()``
    ends the thread promptly and re-raises what killed it (a 401/403 is fatal:
    the credentials cannot read logs; anything else is retried).
    """

    def __init__(self, read_log: Callable[..., Any], namespace: str, pod: str, container: str, path: Path,
                 current: Callable[[], Instance | None], *, retry_s: float = 0.3) -> None:
        self._read_log = read_log
        self.namespace, self.pod, self.container, self.path = namespace, pod, container, path
        self._current = current
        self._retry_s = retry_s
        self._instance: Instance | None = None
        self._last_ts: int | None = None
        self._at_last = 0          # lines written with timestamp == _last_ts
        self._skip = 0             # of those, still to skip in the resumed stream
        self.instances_followed = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._resp: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"logs-{pod}", daemon=True)

    def start(self) -> PodLogFollower:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        with self._lock:
            resp = self._resp
        if resp is not None:
            _shutdown(resp)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            from elastic_chaos.errors import PlatformError
            raise PlatformError(f"log follower of {self.pod} did not stop")
        if self._error is not None:
            from elastic_chaos.errors import PlatformError
            raise PlatformError(f"following the log of pod {self.pod} failed: {self._error}") from self._error

    def reconnect(self) -> bool:
        """Cut the current log stream (as a flaky network would); the follower resumes
        without writing a line twice. False when no stream was open."""
        with self._lock:
            resp = self._resp
        if resp is not None:
            _shutdown(resp)
        return resp is not None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                now = self._current()
                if now is None or not now.started:
                    self._stop.wait(self._retry_s)
                    continue
                self._switch_to(now)
                self._follow(previous=False)
                self._stop.wait(self._retry_s)
        except BaseException as exc:
            log.exception("log follower of %s failed", self.pod)
            self._error = exc

    def _switch_to(self, now: Instance) -> None:
        old = self._instance
        if old is not None and (old.uid, old.restarts) == (now.uid, now.restarts):
            return
        if old is not None and old.uid == now.uid:
            self._follow(previous=True)   # the rest of what the restarted container printed
        if old is not None:
            what = "restarted" if old.uid == now.uid else "was replaced"
            self._write([f"--- elastic-chaos: pod {self.pod} {what} (uid {now.uid[:8]}, "
                         f"restart {now.restarts}) ---"])
        self._instance = now
        self._last_ts, self._at_last = None, 0
        self.instances_followed += 1

    def _follow(self, *, previous: bool) -> None:
        try:
            resp = self._read_log(self.pod, self.namespace, container=self.container, follow=not previous,
                                  timestamps=True, _preload_content=False, _request_timeout=(10, 300),
                                  **({"previous": True} if previous else {}))
        except Exception as exc:
            if api_status(exc) in (401, 403) or not is_transient(exc):
                raise
            log.debug("logs of %s not readable yet: %s", self.pod, exc)
            return
        with self._lock:
            self._resp = resp
        self._skip = self._at_last
        try:
            with open(self.path, "a", encoding="utf-8") as out:
                for raw in iter_lines(resp):
                    self._emit(raw.decode("utf-8", "replace").rstrip("\r"), out)
                    if self._stop.is_set():
                        return
        except Exception as exc:  # the stream broke: the loop looks again
            if not is_transient(exc):
                raise
            log.debug("log stream of %s ended: %s", self.pod, exc)
        finally:
            with self._lock:
                self._resp = None
            _close(resp)

    def _emit(self, line: str, out: IO[str]) -> None:
        stamp, _, text = line.partition(" ")
        ts = parse_ts(stamp)
        if ts is None:
            text = line
        elif self._last_ts is None or ts > self._last_ts:
            self._last_ts, self._at_last, self._skip = ts, 1, 0
        elif ts == self._last_ts and self._skip > 0:
            self._skip -= 1        # written before the stream was resumed
            return
        elif ts == self._last_ts:
            self._at_last += 1
        else:
            return                 # older than what was written: seen before the resume
        out.write(text + "\n")
        out.flush()

    def _write(self, lines: list[str]) -> None:
        with open(self.path, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
