"""``elastic-chaos reap``: stop what killed local runs left running.

A local run registers itself while it runs (``<state dir>/local-runs``). When its
runner is killed (SIGKILL, the OOM killer, a CI job cancelled hard), the kernel
kills its agents and etcd, and its watchdog the rest; if the watchdog was
killed too, the etcd server, node processes, cgroups, network namespaces and
storage mounts (FUSE, with their daemons) of that run are still there. Every
later local run reaps them before it starts; this command does it now, and
says what it did, including what watchdogs reaped since the last run or reap.

Processes are found by the run's tag in /proc/PID/environ and their start time,
etcd by its PID and start time, never by name; a run whose runner is alive is
left alone.

Not ``cleanup``: that one finishes a crashed game day's rollbacks in AWS and
Kubernetes from its journal; this one is about processes on this machine.

Exit 0 when nothing is left running, 1 when something could not be reaped (it
stays registered for the next try), 2 on a usage error.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

EXAMPLES = """
examples:
  elastic-chaos reap                  # reap and say what
  elastic-chaos reap --dry-run        # only list the runs whose runner is gone
  ELASTIC_CHAOS_STATE=/var/lib/chaos elastic-chaos reap
"""


def register(sub: Any) -> None:
    from chaos.platforms.local.registry import default_state_dir
    p = sub.add_parser("reap", help="stop what killed local runs left running (etcd, nodes, cgroups, mounts)",
                       description=__doc__ + EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-dir", type=Path, default=default_state_dir(),
                   help="where local runs register (default $ELASTIC_CHAOS_STATE or ~/.elastic-chaos)")
    p.add_argument("--dry-run", action="store_true", help="list the runs whose runner is gone; stop nothing")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from chaos.platforms.local.registry import Registry
    registry = Registry(args.state_dir)
    if args.dry_run:
        dead = registry.dead()
        for record in dead:
            still = record.still_running()
            print(f"would reap run {record.run_id} (report {record.report_dir}; runner PID {record.runner_pid} is "
                  f"gone): {', '.join(still) if still else 'nothing of it is running'}")
        if not dead:
            print(f"no run left behind ({registry.dir})")
        return 0
    reaped = registry.reap_dead(by="elastic-chaos reap")
    for r in reaped:
        print(r.describe())
    if not reaped:
        print(f"nothing to reap: no run left behind ({registry.dir})")
    return 1 if any(r.errors for r in reaped) else 0
