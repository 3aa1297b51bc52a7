"""`make soak` (`python -m bench.soak`): our own flakiness, measured.

Runs the local scenario catalog (`pytest scenarios/`) N times back to back
(``--runs``, ``SOAK_RUNS``, default 5) and, as root with a local cluster up
(`make cluster-up`), the cluster catalog (``--platform kubernetes``) M times
(``--cluster-runs``, ``SOAK_CLUSTER_RUNS``, default 3). The two catalogs run side by
side, as `.ci/run` runs them (each its runs back to back): the cluster catalog
waits on pods and timeouts, not on the CPU. Each catalog run keeps
its report folders (``--reports``, default ``reports/soak/<catalog>-<i>/``) and
its tests' outcomes (a small pytest plugin, :mod:`bench.soak_plugin`, logs each
test's phases by node id, on xdist's controller too).

Per scenario it reports how often it passed, failed and was skipped, whether it
is **flaky** (it both passed and failed over identical runs: a failure that
differs between identical runs is ours to fix at its cause, never retried), and
the spread of its key metrics over the runs, read from the report folders
(every injected fault's ``regain_s`` and ``lost_steps``: n, min, median, max).
The result goes into bench/results.json (``soak``, every other figure kept) and
its section of bench/RESULTS.md (bench/render/soak.py; re-rendered from results.json, the plots left as they are).

``-k EXPR`` selects scenarios as pytest does (a small soak); ``--render`` only
re-renders from results.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.stats import median_of, stat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
METRICS = ("regain", "lost_steps")
"""The key metrics whose spread the soak reports (elastic_chaos.reporting.audits.audit's names)."""


_SAYING = threading.Lock()
"""The two catalogs' threads say things at once: one whole line each."""


def say(text: str) -> None:
    with _SAYING:
        sys.stdout.write(f"[{time.strftime('%H:%M:%S')}] soak: {text}\n")
        sys.stdout.flush()


def _count(env: str, default: int) -> int:
    raw = os.environ.get(env, "").strip()
    return int(raw) if raw else default


# -- one catalog run ------------------------------------------------------------------------
@dataclass(frozen=True)
class CatalogRun:
    """One run of a catalog: where its reports and its outcome log are, and how it ended."""

    catalog: str
    """``local`` or ``cluster``."""
    index: int
    reports: Path
    log: Path
    exit_code: int
    wall_s: float
    commit: str | None = None
    """The checkout's commit when the run started (its code: a run imports it then)."""


def pytest_command(catalog: str, reports: Path, log: Path, *, keyword: str | None, workers: int,
                   kubeconfig: Path | None = None) -> list[str]:
    """The pytest command of one catalog run (the same as `make scenarios` / `make cluster-test`)."""
    cmd = [sys.executable, "-m", "pytest", "scenarios/", "-p", "bench.soak_plugin", "--soak-log", str(log),
           "--chaos-reports", str(reports), "-q", "-p", "no:cacheprovider"]
    if workers > 0 and catalog == "local":   # the cluster catalog runs one job at a time, as make cluster-test
        cmd += ["-n", str(workers)]
    if catalog == "cluster":
        assert kubeconfig is not None
        cmd += ["--platform", "kubernetes", "--kubeconfig", str(kubeconfig)]
    if keyword:
        cmd += ["-k", keyword]
    return cmd


LIVE: set[subprocess.Popen[bytes]] = set()
"""The catalog runs going on now (one per catalog, side by side): an interrupted soak stops each."""


def run_catalog(catalog: str, index: int, root: Path, *, keyword: str | None, workers: int,
                kubeconfig: Path | None = None) -> CatalogRun:
    """Run the catalog once (blocks for the whole catalog); its reports go under ``root``."""
    reports = root / f"{catalog}-{index}"
    if reports.exists():
        shutil.rmtree(reports)
    reports.mkdir(parents=True)
    log = reports / "outcomes.jsonl"
    code_at = commit()
    began = time.monotonic()
    # its own session: a Ctrl-C at the terminal reaches only the soak, which forwards one SIGINT
    # (a second would cut the scenario's teardown short)
    proc = subprocess.Popen(pytest_command(catalog, reports, log, keyword=keyword, workers=workers,
                                           kubeconfig=kubeconfig), cwd=ROOT, start_new_session=True,
                            preexec_fn=hears_sigint)
    LIVE.add(proc)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        stop_catalog(proc)
        raise
    finally:
        LIVE.discard(proc)
    return CatalogRun(catalog, index, reports, log, code, round(time.monotonic() - began, 1), code_at)


def hears_sigint() -> None:
    """In the catalog run's child, before its exec: SIGINT at its default action. The soak stops a catalog
    run with SIGINT (stop_catalog); a soak started in the background of a shell script has SIGINT ignored,
    and an ignored signal is inherited across exec, so its catalog run would ignore the stop and be killed
    after the wait with its job still up."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


STOP_WAIT_S = 180.0
"""How long an interrupted catalog run gets to tear its job down (a cluster job's pods too)."""


def stop_catalog(proc: subprocess.Popen[bytes], wait_s: float = STOP_WAIT_S) -> None:
    """Interrupt a catalog run as Ctrl-C would (its scenario's teardown removes the job: on a
    cluster nothing else would) and wait for it; SIGKILL only after ``wait_s``."""
    if proc.poll() is not None:
        return
    say(f"stopping the catalog run at hand (PID {proc.pid}): its job is torn down first (up to {wait_s:.0f} s)")
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        say(f"the catalog run did not stop within {wait_s:.0f} s: killed (PID {proc.pid})")
        proc.kill()
        proc.wait()


# -- reading a run back ----------------------------------------------------------------------
def outcomes(log: Path) -> dict[str, str]:
    """Each test's outcome from the plugin's log: ``failed`` when any phase failed (a teardown's
    split-brain check too), ``skipped`` when it was skipped, else ``passed``."""
    seen: dict[str, str] = {}
    if not log.exists():
        return seen
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        node, outcome = str(entry.get("nodeid")), str(entry.get("outcome"))
        before = seen.get(node)
        if outcome == "failed" or before == "failed":
            seen[node] = "failed"
        elif outcome == "skipped" or before == "skipped":
            seen[node] = "skipped"
        else:
            seen[node] = "passed"
    return seen


def metrics(reports: Path) -> dict[str, dict[str, list[float]]]:
    """Each scenario's key metrics (every injected fault's), from the report folders under
    ``reports`` (keyed by report.json's ``scenario``: the test's node id). An unreadable folder
    is left out (the audit's reader says why)."""
    from elastic_chaos.reporting.audits.audit import fault_metric, find_runs, survey
    runs, _ = survey(find_runs([reports])) if any(reports.rglob("report.json")) else ([], [])
    out: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        scenario = _scenario_of(run.folder)
        if scenario is None:
            continue
        per = out.setdefault(scenario, {m: [] for m in METRICS})
        for f in run.faults:
            for m in METRICS:
                value = fault_metric(f, m)
                if value is not None:
                    per[m].append(round(value, 3))
    return out


def _scenario_of(folder: Path) -> str | None:
    try:
        scenario = json.loads((folder / "report.json").read_text(encoding="utf-8")).get("scenario")
    except (OSError, ValueError, AttributeError):
        return None
    return scenario if isinstance(scenario, str) else None


# -- aggregation -----------------------------------------------------------------------------
@dataclass
class Scenario:
    """One scenario over every catalog run of a soak."""

    nodeid: str
    catalog: str
    outcomes: list[str] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: {m: [] for m in METRICS})

    @property
    def passed(self) -> int:
        return self.outcomes.count("passed")

    @property
    def failed(self) -> int:
        return self.outcomes.count("failed")

    @property
    def skipped(self) -> int:
        return self.outcomes.count("skipped")

    @property
    def flaky(self) -> bool:
        """It passed in some identical runs and failed in others."""
        return self.passed > 0 and self.failed > 0

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.nodeid, "catalog": self.catalog, "runs": len(self.outcomes),
                "passed": self.passed, "failed": self.failed, "skipped": self.skipped, "flaky": self.flaky,
                "outcomes": list(self.outcomes), "metrics": {m: spread(v) for m, v in self.values.items()}}


def spread(values: Sequence[float]) -> dict[str, Any]:
    """n, min, median (bench.stats: nearest rank), max and the values of one metric over the runs; None where
    unmeasured."""
    s = stat(values)
    return {"n": s.n, "min": s.min, "median": median_of(values), "max": s.max, "values": list(values)}


def aggregate(runs: Iterable[tuple[str, Mapping[str, str], Mapping[str, Mapping[str, list[float]]]]]
              ) -> list[Scenario]:
    """Scenarios from (catalog, outcomes by node id, metrics by node id) of each catalog run."""
    found: dict[tuple[str, str], Scenario] = {}
    for catalog, outs, values in runs:
        for nodeid, outcome in outs.items():
            s = found.setdefault((catalog, nodeid), Scenario(nodeid, catalog))
            s.outcomes.append(outcome)
            for m, vs in (values.get(nodeid) or {}).items():
                s.values.setdefault(m, []).extend(vs)
    return sorted(found.values(), key=lambda s: (s.catalog, s.nodeid))


def summary(scenarios: Sequence[Scenario], runs: Sequence[CatalogRun], *, keyword: str | None,
            date: str, side_by_side: bool = False) -> dict[str, Any]:
    """results.json's ``soak`` block (``side_by_side``: its catalogs ran at the same time)."""
    per_catalog: dict[str, dict[str, Any]] = {}
    for r in runs:
        c = per_catalog.setdefault(r.catalog, {"runs": 0, "wall_s": [], "exit_codes": []})
        c["runs"] += 1
        c["wall_s"].append(r.wall_s)
        c["exit_codes"].append(r.exit_code)
    for name, c in per_catalog.items():
        c["date"], c["commit"] = date, commits([r.commit for r in runs if r.catalog == name]) or commit()
        mine = [s for s in scenarios if s.catalog == name]
        c["scenarios"] = len(mine)
        c["failures"] = sum(s.failed for s in mine)
        c["flaky"] = [s.nodeid for s in mine if s.flaky]
        c["always_failed"] = [s.nodeid for s in mine if s.failed and not s.passed]
    return {"date": date, "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)",
            "keyword": keyword, "side_by_side": side_by_side, "catalogs": per_catalog,
            "scenarios": [s.to_json() for s in scenarios]}


def commits(at_start: Sequence[str | None]) -> str | None:
    """The code a catalog's runs soaked: one commit, or the first and the last when the checkout moved
    between runs (said so: each run imports the code when it starts)."""
    seen = list(dict.fromkeys(c for c in at_start if c))
    if not seen:
        return None
    return seen[0] if len(seen) == 1 else f"{seen[0]} to {seen[-1]} (the checkout moved during the soak)"


def commit() -> str | None:
    """The checkout's short commit (None outside a git checkout): which code a catalog run soaked."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def merged(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> dict[str, Any]:
    """The soak block after this soak: the catalogs it ran replace theirs; a catalog it did not run
    (`--runs 0` to soak only the cluster's) keeps its previous figures, each catalog with its date."""
    ran = set(now.get("catalogs") or {})
    kept = {name: c for name, c in ((before or {}).get("catalogs") or {}).items() if name not in ran}
    for c in kept.values():
        c.setdefault("date", (before or {}).get("date"))
        c.setdefault("commit", (before or {}).get("commit"))
    return {**now, "catalogs": {**kept, **(now.get("catalogs") or {})},
            "scenarios": sorted([s for s in (before or {}).get("scenarios") or [] if s.get("catalog") in kept]
                                + list(now.get("scenarios") or []), key=lambda s: (s["catalog"], s["scenario"]))}


# -- RESULTS.md ------------------------------------------------------------------------------
def cluster_kubeconfig() -> Path | None:
    """The local cluster's kubeconfig when this process is root and a cluster is up, else None."""
    if os.geteuid() != 0:
        return None
    cluster_dir = Path(os.environ.get("ELASTIC_CHAOS_CLUSTER_DIR") or ROOT / ".cluster")
    env = {**os.environ, "ELASTIC_CHAOS_CLUSTER_DIR": str(cluster_dir), "PYTHONPATH": str(ROOT)}
    status = subprocess.run([sys.executable, "-m", "elastic_chaos.localcluster", "status"], env=env,
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    kubeconfig = cluster_dir / "kubeconfig"
    return kubeconfig if status.returncode == 0 and kubeconfig.is_file() else None


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=_count("SOAK_RUNS", 5),
                   help="local catalog runs (SOAK_RUNS; default 5)")
    p.add_argument("--cluster-runs", type=int, default=_count("SOAK_CLUSTER_RUNS", 3),
                   help="cluster catalog runs when root and a local cluster is up (SOAK_CLUSTER_RUNS; default 3)")
    p.add_argument("-k", dest="keyword", default=os.environ.get("SOAK_K") or None,
                   help="only the scenarios matching this pytest -k expression (SOAK_K)")
    p.add_argument("--workers", type=int, default=_count("SCENARIO_WORKERS", 2 if (os.cpu_count() or 1) >= 2 else 0),
                   help="pytest-xdist workers per local catalog run (SCENARIO_WORKERS; as `make scenarios`); "
                        "the cluster catalog runs one job at a time, as `make cluster-test`")
    p.add_argument("--reports", type=Path, default=ROOT / "reports" / "soak",
                   help="where each catalog run's report folders go (default reports/soak/)")
    p.add_argument("--out", type=Path, default=HERE, help="where results.json and RESULTS.md are (default bench/)")
    p.add_argument("--render", action="store_true", help="measure nothing: re-render RESULTS.md from results.json")
    args = p.parse_args(argv)
    for name in ("runs", "cluster_runs"):
        if not 0 <= getattr(args, name) <= 100:
            p.error(f"--{name.replace('_', '-')} must be 0..100")
    return args


def soak(args: argparse.Namespace, run: Callable[..., CatalogRun] | None = None) -> dict[str, Any]:
    """Run the catalogs (``run``: run_catalog) and return the ``soak`` block (blocks for every catalog run)."""
    run = run or run_catalog
    plan: list[tuple[str, int, Path | None]] = [("local", args.runs, None)]
    kubeconfig = cluster_kubeconfig() if args.cluster_runs else None
    if kubeconfig is not None:
        plan.append(("cluster", args.cluster_runs, kubeconfig))
    elif args.cluster_runs:
        say("no cluster catalog: it needs root and a local cluster up (make cluster-up)")
    ran: dict[str, list[tuple[CatalogRun, dict[str, str], dict[str, dict[str, list[float]]]]]] = {}
    stopping = threading.Event()
    failed: list[BaseException] = []

    def runs_of(catalog: str, count: int, kc: Path | None) -> None:
        try:
            for i in range(count):
                if stopping.is_set():
                    return
                say(f"{catalog} catalog, run {i + 1} of {count}")
                r = run(catalog, i, args.reports, keyword=args.keyword, workers=args.workers, kubeconfig=kc)
                outs = outcomes(r.log)
                say(f"{catalog} run {i + 1}: exit {r.exit_code}, {sum(o == 'failed' for o in outs.values())} "
                    f"failed of {len(outs)}, {r.wall_s:.0f} s")
                ran.setdefault(catalog, []).append((r, outs, metrics(r.reports)))
        except BaseException as exc:   # re-raised by the soak itself, after the other catalog stopped
            failed.append(exc)
            stopping.set()

    threads = [threading.Thread(target=runs_of, args=p, name=f"soak-{p[0]}", daemon=True) for p in plan if p[1]]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():   # each catalog run is bounded by its scenarios' own timeouts
                t.join(1.0)
                if failed:
                    raise failed[0]
    except BaseException:
        stopping.set()
        for proc in list(LIVE):
            stop_catalog(proc)
        for t in threads:
            t.join(STOP_WAIT_S + 30)
        raise
    done = [r for catalog, _, _ in plan for r, _, _ in ran.get(catalog, [])]
    read = [(catalog, outs, values) for catalog, _, _ in plan for _, outs, values in ran.get(catalog, [])]
    return summary(aggregate(read), done, keyword=args.keyword, date=datetime.date.today().isoformat(),
                   side_by_side=len(threads) > 1)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    from bench.results_file import RESULTS, derive, drawn, read_json, write_files
    path = args.out / RESULTS
    try:
        results: dict[str, Any] = read_json(path) if path.exists() else {}
    except (OSError, ValueError) as exc:
        print(f"soak: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if not args.render:
        from elastic_chaos.signals import terminate_cleanly
        terminate_cleanly()  # `kill PID` stops the catalog run at hand and everything it started
        try:
            results["soak"] = merged(results.get("soak"), soak(args))
        except KeyboardInterrupt:
            say("interrupted: results.json and RESULTS.md left as they were")
            return 130
    # every measured figure and the plots stay as they are; what is derived from them is derived again, as
    # `python -m bench --render` does: a results.json derived by an older toolkit would not render
    derive(results, say)
    write_files(args.out, results, drawn(args.out))
    say(f"wrote {path} and {args.out / 'RESULTS.md'}")
    flaky = [f for c in (results.get("soak") or {}).get("catalogs", {}).values() for f in c.get("flaky") or []]
    say(f"{len(flaky)} flaky scenario(s)" + (f": {', '.join(flaky)}" if flaky else ""))
    return 1 if flaky else 0


if __name__ == "__main__":
    sys.exit(main())
