"""Faults inside a running pod, through ``exec`` (``kubectl exec``'s API): a worker crash, etcd stopped.

What a pod runs is not ours to signal from outside on most clusters (the
processes live on another machine), but the API server lets an authorized
client run a command in a container (``pods/exec``, a websocket the kubelet
serves). The commands are POSIX ``sh`` and only need ``/proc``:

- :func:`kill_worker_command`: SIGKILL the worker process whose environment
  has ``LOCAL_RANK=<r>`` (torchrun sets it for its workers, never for itself),
  as an OOM kill or a segfault would end it; its agent then restarts the group.
- :func:`hang_worker_command` / :func:`resume_worker_command`: SIGSTOP the
  worker with ``LOCAL_RANK=<r>`` (the topmost such process: its data-loader
  children inherit the variable) where it is, and SIGCONT it later only if the
  PID is still that process (its start time unchanged).
- etcd (run under the loop of ``manifests.ETCD_LOOP``): ``crash`` SIGKILLs it and
  holds it down until :func:`etcd_resume_command`; ``hang`` SIGSTOPs it (its
  sockets stay open, nothing answers) until SIGCONT.

A refused exec (403: the credentials lack ``pods/exec`` create) is an
InjectionFailed that says so. Each exec runs on an ApiClient of its own
(:func:`elastic_chaos.platforms.kubernetes.clients.exec_core_v1`), never on the one the
platform's watches use.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from elastic_chaos.errors import InjectionFailed
from elastic_chaos.platforms.kubernetes.clients import exec_core_v1, exec_stream
from elastic_chaos.platforms.kubernetes.manifests import ETCD_HOLD, ETCD_PID
from elastic_chaos.platforms.kubernetes.watch import api_message, api_status


@dataclass(frozen=True)
class ExecResult:
    code: int | None
    """The command's exit status (None when the server did not say)."""
    out: str
    err: str


def exec_in(core_v1: Any, namespace: str, pod: str, container: str, script: str, *,
            timeout_s: float = 30.0) -> ExecResult:
    """Run ``sh -c script`` in the container; blocks until it ends (or ``timeout_s``). Safe beside
    other threads using ``core_v1``'s client: the stream opens on a client of its own."""
    with exec_core_v1(core_v1) as own:
        return _exec(exec_stream(), own, namespace, pod, container, script, timeout_s)


def _exec(stream: Any, core_v1: Any, namespace: str, pod: str, container: str, script: str,
          timeout_s: float) -> ExecResult:
    try:
        resp = stream(core_v1.connect_get_namespaced_pod_exec, pod, namespace, container=container,
                      command=["/bin/sh", "-c", script], stdin=False, stdout=True, stderr=True, tty=False,
                      _preload_content=False)
    except Exception as exc:
        status = api_status(exc)
        hint = (" -- the credentials may not create pods/exec (see docs/KUBERNETES.md, RBAC)"
                if status == 403 else "")
        raise InjectionFailed(f"exec in pod {namespace}/{pod} failed: "
                              f"{f'HTTP {status} ' if status else ''}{api_message(exc)}{hint}") from exc
    try:
        resp.run_forever(timeout=timeout_s)
        out, err = resp.read_stdout(), resp.read_stderr()
        return ExecResult(_returncode(resp), out or "", err or "")
    finally:
        resp.close()
        # a websocket the server already closed is left open by close(): drop its socket too
        shutdown = getattr(getattr(resp, "sock", None), "shutdown", None)
        if shutdown is not None:
            shutdown()


def _returncode(resp: Any) -> int | None:
    """The exit status from the exec's error channel (``Success``, or ``NonZeroExitCode`` with
    its ``ExitCode`` cause); None when the channel said nothing."""
    raw = resp.read_channel(3)
    if not raw:
        return None
    status = json.loads(raw)
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause.get("message", 1))
    return 1


def kill_worker_command(local_rank: int) -> str:
    """SIGKILL the worker with ``LOCAL_RANK=<local_rank>``; prints its PID; exit 3 when there is none."""
    want = shlex.quote(f"LOCAL_RANK={local_rank}")
    return (f"for e in /proc/[0-9]*/environ; do p=${{e#/proc/}}; p=${{p%/environ}}; "
            f"if tr '\\0' '\\n' < \"$e\" 2>/dev/null | grep -qx {want}; then kill -KILL \"$p\" && echo \"$p\"; "
            "exit 0; fi; done; exit 3")


_STAT_FIELDS = 's=${s##*) }; set -- $s'
"""After it, ``$1`` is the state and ``$2`` the parent PID of the /proc/PID/stat read into ``s``
(the command name, which may hold spaces, cut off), ``${20}`` the start time."""


def hang_worker_command(local_rank: int, *, wait_s: float = 2.0) -> str:
    """SIGSTOP the worker with ``LOCAL_RANK=<local_rank>`` and wait until it is stopped (state
    T); prints ``PID STARTTIME``. Exit 3: no such worker; 5: it did not stop within ``wait_s``."""
    want = shlex.quote(f"LOCAL_RANK={local_rank}")
    polls = max(1, round(wait_s / 0.01))
    return (f"has() {{ tr '\\0' '\\n' < /proc/$1/environ 2>/dev/null | grep -qx {want}; }}; "
            "for d in /proc/[0-9]*; do p=${d#/proc/}; has \"$p\" || continue; "
            f"s=$(cat /proc/$p/stat 2>/dev/null) || continue; {_STAT_FIELDS}; has \"$2\" && continue; "
            'kill -STOP "$p" || exit 4; i=0; '
            f"while [ $i -lt {polls} ]; do s=$(cat /proc/$p/stat 2>/dev/null) || exit 3; {_STAT_FIELDS}; "
            'if [ "$1" = T ]; then echo "$p ${20}"; exit 0; fi; sleep 0.01; i=$((i+1)); done; '
            'echo "$p"; exit 5; done; exit 3')


def resume_worker_command(pid: int, start_time: str) -> str:
    """SIGCONT ``pid`` if it is still the process that started at ``start_time``; prints
    ``resumed`` then (nothing when it is gone or another process)."""
    return (f"s=$(cat /proc/{pid}/stat 2>/dev/null) || exit 0; {_STAT_FIELDS}; "
            f'[ "${{20}}" = {shlex.quote(start_time)} ] || exit 0; kill -CONT {pid} && echo resumed')


def etcd_stop_command(hang: bool) -> str:
    """Crash (SIGKILL, held down) or hang (SIGSTOP) the etcd the loop runs; prints its PID."""
    if hang:
        return f'p=$(cat {ETCD_PID}) && kill -STOP "$p" && echo "$p"'
    return f'touch {ETCD_HOLD} && p=$(cat {ETCD_PID}) && kill -KILL "$p" && echo "$p"'


def etcd_resume_command() -> str:
    """Undo either: let the loop start etcd again (same data), and SIGCONT a stopped one."""
    return f'rm -f {ETCD_HOLD}; p=$(cat {ETCD_PID} 2>/dev/null) && kill -CONT "$p" 2>/dev/null; exit 0'
