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

With ``--kubeconfig`` it sweeps a cluster instead: a Kubernetes run's objects (its StatefulSet
or operator job, its etcd Deployment and Services, its pods) carry our labels and the runner's
host, PID and start time. A run whose runner ran on this host and is gone is removed; a run
whose runner is alive is left alone; a run from another host (a CI runner), or with no runner
stamp, is listed, and removed only when named with ``--run-id``. Nothing without our labels
is touched.

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
  elastic-chaos reap --kubeconfig .cluster/kubeconfig --dry-run   # a killed run's pods on a cluster
  elastic-chaos reap --kubeconfig ~/.kube/ci --run-id chaos-1a2b3c4d   # a run a gone CI runner left
"""


def register(sub: Any) -> None:
    from elastic_chaos.host.registry import default_state_dir
    p = sub.add_parser("reap", help="stop what killed local runs left running (etcd, nodes, cgroups, mounts)",
                       description=__doc__ + EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-dir", type=Path, default=default_state_dir(),
                   help="where local runs register (default $ELASTIC_CHAOS_STATE or ~/.elastic-chaos)")
    p.add_argument("--dry-run", action="store_true", help="list the runs whose runner is gone; stop nothing")
    k = p.add_argument_group("a cluster (instead of this machine)")
    k.add_argument("--kubeconfig", help="sweep this cluster for what killed Kubernetes runs left")
    k.add_argument("--kube-context", help="the kubeconfig's context (default: its current one)")
    k.add_argument("--namespace", default=None, help="the namespace the runs used (default: default)")
    k.add_argument("--run-id", action="append", default=[], metavar="ID",
                   help="also remove this run's objects although its runner is on another host or unknown "
                        "(repeatable); never one whose runner is alive here")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.kubeconfig or args.namespace or args.run_id or args.kube_context:
        return sweep_cluster(args)
    from elastic_chaos.host.registry import Registry
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


def sweep_cluster(args: argparse.Namespace) -> int:
    """The cluster's runs: remove those whose runner is gone (or named), say why for the rest."""
    from elastic_chaos.errors import ChaosError, SpecError
    from elastic_chaos.platforms.kubernetes import clients
    from elastic_chaos.platforms.kubernetes.manifests import check_run_id
    from elastic_chaos.platforms.kubernetes.orphans import Runner, find_runs, remove
    namespace = args.namespace or "default"
    if args.kubeconfig and not Path(args.kubeconfig).expanduser().is_file():
        raise SpecError(f"--kubeconfig {args.kubeconfig} is not a file")
    try:
        named = {check_run_id(r) for r in args.run_id}
        custom = clients.custom_objects_api(args.kubeconfig, args.kube_context)
        core, apps = clients.core_v1_api_of(custom), clients.apps_v1_api_of(custom)
        runs = find_runs(core, apps, custom, namespace)
    except (ChaosError, SpecError) as exc:
        raise SpecError(str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - an API error: say it, no traceback
        raise SpecError(f"cannot list the runs in namespace {namespace}: {getattr(exc, 'reason', None) or exc}") \
            from exc
    failed = False
    for run in runs:
        state, why = run.runner()
        if state is Runner.ALIVE or (state is not Runner.GONE and run.run_id not in named):
            hint = "" if state is Runner.ALIVE else f"; remove it with --run-id {run.run_id}"
            print(f"left run {run.run_id} ({why}{hint}): {run.describe()}")
            continue
        if args.dry_run:
            print(f"would remove run {run.run_id} ({why}): {run.describe()}")
            continue
        errors = remove(core, apps, custom, namespace, run)
        failed = failed or bool(errors)
        print(f"removed run {run.run_id} ({why}): {run.describe()}" if not errors else
              f"could not fully remove run {run.run_id}: {'; '.join(errors)}")
    missing = named - {r.run_id for r in runs}
    for run_id in sorted(missing):
        print(f"no objects of run {run_id} in namespace {namespace}")
    if not runs:
        print(f"no run's objects in namespace {namespace}")
    return 1 if failed else 0
