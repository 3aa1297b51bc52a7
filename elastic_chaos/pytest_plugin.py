"""pytest plugin: run chaos scenarios as plain tests (registered under ``pytest11``).

Options (group "chaos"): ``--platform`` picks where jobs run (default
``local``), ``--chaos-reports`` where each test leaves its report folder (also
the ini setting ``chaos_reports``; default ``reports/`` beside the ini file,
else in the rootdir), and every platform's own declared options, as ``elastic-chaos run --platform NAME``
offers them (``--etcd-binary``, ``--network``; ``--kubeconfig``,
``--kube-context``, ``--namespace``, ``--job-kind``, ``--trainer-image``, ...):
session-wide values a scenario's keywords override.

Markers: ``platforms(*names, reason=...)`` limits a scenario to the platforms it
makes sense on (others skip with a hint and the reason); ``needs_root`` skips with the reason when
not root; ``slow``, ``k8s_api`` and ``aws`` label tests that start real jobs
or servers.

Fixtures: ``run_hypothesis`` runs one hypothesis of the catalog
(elastic_chaos.hypotheses: the same code ``elastic-chaos run`` runs) and fails the
test with its verdict; ``start_job`` starts one elastic job for a scenario
that drives the run itself. Both always stop the job (and its etcd) and write
``<reports>/<test id>/`` with ``timeline.jsonl``, node logs and ``report.json``.
On the local platform a relative ``script=[...]`` path and ``workdir`` are taken
from pytest's rootdir (not the current directory), so ``pytest repo/scenarios``
from elsewhere runs the same. A setup problem (no etcd, no torch) fails the test
with the message that says what to install, not a traceback.

Reporting: a failed scenario's message ends with an "elastic-chaos" section
(its report folder and the timeline slice around the fault), and each
scenario test carries its recovery metrics as JUnit XML properties
(``chaos.verdict``, ``chaos.report``, ``chaos.fault0.regain_s``, ...). The
terminal summary says where the session's report folders went.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from elastic_chaos.analysis.verdict import Outcome, Verdict
from elastic_chaos.options import add_arguments, declared
from elastic_chaos.runner.folder import holder
from elastic_chaos.runner.run import ChaosRun

MARKERS = {
    "platforms(*names, reason=None)": "run only on these platforms (local, kind, kubernetes, eks); others "
                                      "skip, saying why when a reason is given",
    "needs_root": "needs root (network namespaces, cgroups); skips with the reason otherwise",
    "slow": "starts real elastic jobs (seconds to minutes each)",
    "k8s_api": "runs against a real kube-apiserver started by the test setup",
    "aws": "runs against a real moto server standing in for AWS",
}

DEFAULT_REPORTS = "reports"
"""The per-test report folders' parent when neither ``--chaos-reports`` nor the ini's
``chaos_reports`` says otherwise: ``reports/`` in the rootdir."""

_REPORT_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
RUNS_KEY = pytest.StashKey[list[ChaosRun]]()
_ERROR_KEY = pytest.StashKey[dict[str, BaseException]]()
"""The exception that failed each phase of a test (its verdict's check says whose it was)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "elastic-chaos scenarios")
    group.addoption("--platform", default="local",
                    help="where scenario jobs run: local (default), kind, kubernetes, eks")
    group.addoption("--chaos-reports", default=None, type=Path, metavar="DIR",
                    help="folder for per-test reports, relative to the current directory (default: the ini "
                         "setting chaos_reports, else reports/ in the rootdir)")
    parser.addini("chaos_reports", default=DEFAULT_REPORTS,
                  help=f"elastic-chaos: folder for per-test report folders, relative to the ini file "
                       f"(default {DEFAULT_REPORTS}); --chaos-reports overrides it")
    # every platform's declared options, as on `elastic-chaos run --platform NAME`:
    # a session-wide value, which a scenario's own keyword overrides
    from elastic_chaos.platforms import PLATFORMS, platform_option_classes
    seen: set[str] = set()
    adapter = _OptionGroup(group)
    for name in PLATFORMS:
        for cls in platform_option_classes(name):
            add_arguments(adapter, cls, skip=seen)
            seen |= {d.key for d in declared(cls)}


class _OptionGroup:
    """argparse's ``add_argument`` on a pytest option group (dests prefixed, so no
    platform option can shadow another plugin's)."""

    def __init__(self, group: Any) -> None:
        self.group = group

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        # pytest parses string defaults with the option's type: "not given" is None here
        self.group.addoption(*flags, **{**kwargs, "dest": _DEST + kwargs["dest"], "default": None})


_DEST = "chaos_option_"


def session_values(config: pytest.Config, platform: str) -> dict[str, Any]:
    """The platform options given on pytest's command line (``--kubeconfig``, ...)."""
    from elastic_chaos.platforms import platform_option_classes
    out: dict[str, Any] = {}
    for cls in platform_option_classes(platform):
        for d in declared(cls):
            value = config.getoption(_DEST + d.key, default=None)
            if value is not None:
                out[d.key] = value
    return out


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    config.pluginmanager.register(_Clock(), _Clock.NAME)
    from elastic_chaos._compat import append_to_sys_path
    append_to_sys_path()  # scenarios written for 0.1 (`from chaos.x import y`) still import, with a FutureWarning
    from elastic_chaos.signals import terminate_cleanly
    terminate_cleanly()  # a CI timeout's SIGTERM still runs fixture teardowns (servers stopped by PID)


def pytest_runtest_setup(item: pytest.Item) -> None:
    platform = item.config.getoption("--platform")
    marker = item.get_closest_marker("platforms")
    if marker is not None and platform not in marker.args:
        why = f": {marker.kwargs['reason']}" if marker.kwargs.get("reason") else ""
        pytest.skip(f"scenario runs on {', '.join(marker.args)}; this session is --platform "
                    f"{platform} (pass --platform {marker.args[0]} to run it){why}")
    if item.get_closest_marker("needs_root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces / cgroups); run as root to include it")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORT_KEY, {})[report.when] = report
    if call.excinfo is not None:
        item.stash.setdefault(_ERROR_KEY, {})[report.when] = call.excinfo.value
    if report.when == "call" and report.failed:
        _add_failure_context(item, report)
    if report.when == "teardown" and item.stash.get(RUNS_KEY, None):
        # on the report, not the item: with pytest-xdist only reports reach the process that prints
        phases = item.stash[_REPORT_KEY].values()
        vars(report)["chaos_run"] = {
            "folder": item.nodeid.split("/", 1)[0] if "/" in item.nodeid else ".",
            "spent_s": sum(r.duration for r in phases),
            "report": str(item.stash[RUNS_KEY][0].report_dir),
            "start": min(r.start for r in phases), "stop": max(r.stop for r in phases)}
    return report


class _Clock:
    """The chaos runs this process saw reported, per top folder (the controller's under xdist)."""

    NAME = "elastic-chaos-clock"

    def __init__(self) -> None:
        self.runs: dict[str, list[dict[str, Any]]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        run = getattr(report, "chaos_run", None)
        if report.when == "teardown" and isinstance(run, dict):
            self.runs.setdefault(str(run["folder"]), []).append(run)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """How long this session's chaos runs took, per top folder (``scenarios/`` is the catalog
    whose time budget CI keeps): from the first run's setup to the last one's teardown, and
    the runs' own setup, run and teardown added up (more than the first when they ran side by
    side, ``-n 2``)."""
    platform = config.getoption("--platform")
    clock = config.pluginmanager.get_plugin(_Clock.NAME)
    for folder, runs in sorted(clock.runs.items() if isinstance(clock, _Clock) else ()):
        wall = max(r["stop"] for r in runs) - min(r["start"] for r in runs)
        spent = sum(r["spent_s"] for r in runs)
        side = f", {spent / 60:.1f} min of runs side by side" if spent > wall * 1.05 else ""
        terminalreporter.write_line(f"elastic-chaos: {len(runs)} chaos run(s) in {folder}/ on --platform "
                                    f"{platform} took {wall / 60:.1f} min{side}")
    if isinstance(clock, _Clock) and clock.runs:
        _announce_reports(terminalreporter, [r for runs in clock.runs.values() for r in runs])


def _announce_reports(terminalreporter: Any, runs: list[dict[str, Any]]) -> None:
    """Where the session's report folders went: one run's report.html, else their parent(s)."""
    folders = sorted({str(r["report"]) for r in runs if r.get("report")})
    if len(folders) == 1:
        html = Path(folders[0]) / "report.html"
        terminalreporter.write_line(f"elastic-chaos: report: {html if html.exists() else folders[0]}")
        return
    for parent in sorted({str(Path(f).parent) for f in folders}):
        count = sum(1 for f in folders if str(Path(f).parent) == parent)
        terminalreporter.write_line(f"elastic-chaos: {count} reports in {parent}{os.sep} "
                                    f"(report.html in each test's folder)")


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    """``assert recovery.lost_steps <= 20`` failing shows what the metric was measured
    from: the timeline slice around that fault."""
    from elastic_chaos.analysis.metrics import Measured, MeasuredInt
    measured = next((v for v in (left, right) if isinstance(v, (Measured, MeasuredInt))), None)
    if measured is None or measured.recovery is None:
        return None
    return [f"{left!r} {op} {right!r}",
            f"{measured.metric} = {measured!r}, measured from this timeline slice:",
            *measured.recovery.explain().splitlines()]


def _add_failure_context(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed scenario's message gets its report folder and the timeline slice
    around the fault(s) (elastic_chaos.reporting.views.failure)."""
    add = getattr(report.longrepr, "addsection", None)
    if add is None:
        return
    from elastic_chaos.reporting.views.failure import failure_text
    for run in item.stash.get(RUNS_KEY, []):
        try:
            text = failure_text(run.report_dir, run.timeline.events(), [f.injected_at for f in run.faults],
                                run.started_at, run.recoveries())
        except Exception as exc:  # noqa: BLE001 - the test's own failure must still be reported
            text = f"report folder: {run.report_dir} (timeline slice unavailable: {exc!r})"
        add("elastic-chaos", text)


def _record_metrics(item: pytest.Item, run: ChaosRun) -> None:
    """The run's metrics, from its report in memory, as JUnit XML properties (``--junitxml``)."""
    from elastic_chaos.reporting.views.failure import metric_properties
    if run.report is None:
        return
    html = run.rendered.html if run.rendered is not None else None
    item.user_properties.extend(metric_properties(run.report.result, html))


@pytest.fixture
def chaos_platform(request: pytest.FixtureRequest) -> str:
    """The platform name this session runs scenarios on (``--platform``)."""
    name: str = request.config.getoption("--platform")
    return name


def reports_root(config: pytest.Config) -> Path:
    """The parent of the per-test report folders: ``--chaos-reports`` (relative to the directory
    pytest was started in), else the ini's ``chaos_reports`` (relative to the ini file), else
    ``reports/`` in the rootdir."""
    given: Path | None = config.getoption("--chaos-reports")
    if given is not None:
        return (config.invocation_params.dir / given.expanduser()).resolve()
    setting = str(config.getini("chaos_reports") or DEFAULT_REPORTS)
    base = config.inipath.parent if config.inipath is not None else config.rootpath
    return (base / Path(setting).expanduser()).resolve()


def from_rootdir(config: pytest.Config, platform: str, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with a relative ``script=[path, ...]`` and ``workdir`` taken from pytest's rootdir
    on the local platform (its nodes run on this machine); elsewhere the path is the image's.
    A script that is not there fails the test saying where it was looked for."""
    if platform != "local":
        return values
    out = dict(values)
    root = config.rootpath
    script = [str(a) for a in out.get("script") or ()]
    if script and script[0] and script[0] != "-m" and not script[0].startswith("-"):
        path = Path(script[0]).expanduser()
        if not path.is_absolute():
            path = root / path
            if not path.is_file():
                pytest.fail(f"script {script[0]!r} not found: looked for {path} (script= paths are relative "
                            f"to pytest's rootdir {root}, the folder of your pytest.ini/pyproject.toml; or give "
                            "an absolute path, e.g. str(Path(__file__).parent / 'train.py'))", pytrace=False)
        out["script"] = [str(path), *script[1:]]
    workdir = out.get("workdir")
    if workdir is not None and not Path(workdir).expanduser().is_absolute():
        out["workdir"] = str(root / Path(workdir).expanduser())
    return out


@contextlib.contextmanager
def _setup_errors_fail_the_test() -> Iterator[None]:
    """A setup or usage problem (no etcd, no torch, a bad option) fails the test with its message,
    which says what to do, instead of a traceback through the toolkit."""
    from elastic_chaos.errors import SetupError, SpecError
    try:
        yield
    except SetupError as exc:  # `from None`: the message alone, not the chained exception too
        raise pytest.fail.Exception(f"elastic-chaos cannot run this scenario here: {exc}", pytrace=False) from None
    except SpecError as exc:
        raise pytest.fail.Exception(f"elastic-chaos: {exc}", pytrace=False) from None


@pytest.fixture
def chaos_report_dir(request: pytest.FixtureRequest) -> Path:
    """This test's report folder, ``<reports>/<test id>-<hash>``: the test id made safe for a file
    name, and a short stable hash of the whole id, so ids that read alike (``kill node``, ``kill_node``)
    never share one. ``<reports>`` is ``--chaos-reports``, the ini's ``chaos_reports`` or ``reports/``
    in the rootdir. Nothing is deleted here: the run replaces an earlier run's files in it
    (elastic_chaos.runner.folder: a run's own files only), and a folder a live run owns (another session
    running the same test) is left alone: this test then reports into ``...-<hash>.2`` (or the next
    free one) and says so."""
    base = report_folder(reports_root(request.config), request.node.nodeid)
    taken: list[str] = []
    for path in (base, *(base.with_name(f"{base.name}.{n}") for n in range(2, 10))):
        who = holder(path)
        if who is None:
            if taken:
                request.node.warn(pytest.PytestWarning(f"{'; '.join(taken)}: this test reports into {path}"))
            return path
        taken.append(f"report folder {path} belongs to a live run ({who})")
    raise pytest.fail.Exception("; ".join(taken), pytrace=False)


def report_folder(root: Path, nodeid: str) -> Path:
    """``root``/<the test id, safe for a file name, at most 120 characters>-<8 hex of its SHA-1>."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:120]
    return root / f"{safe}-{hashlib.sha1(nodeid.encode()).hexdigest()[:8]}"


@pytest.fixture
def start_job(request: pytest.FixtureRequest, chaos_platform: str,
                chaos_report_dir: Path) -> Iterator[Callable[..., ChaosRun]]:
    r"""Factory: ``start_job(nodes="1:2", checkpoint_every=20, replace_lost_nodes=False)``
    starts one elastic job and returns its running ChaosRun, for a scenario that
    drives the run itself with plain asserts. Your own script:
    ``start_job(script=["train.py", "--epochs", "9"], progress_regex=r"epoch (?P<step>\d+)",
    checkpoint="snapshot.pt", workdir=tmp_path)`` (see elastic_chaos.spec.Observation).

    The keywords are the job's options and the platform's (the same names as
    ``elastic-chaos run``'s flags, elastic_chaos.options). Teardown always reverts faults,
    stops the job and etcd, and writes report.json whose verdict is this test's
    outcome. One job per test.
    """
    runs: list[ChaosRun] = request.node.stash.setdefault(RUNS_KEY, [])

    def start(**options: Any) -> ChaosRun:
        from elastic_chaos.hypotheses.api import settings
        if runs:
            raise RuntimeError("start_job starts one job per test")
        values = from_rootdir(request.config, chaos_platform, {**session_values(request.config, chaos_platform),
                                                               **options})
        with _setup_errors_fail_the_test():
            s = settings(None, values, chaos_platform)
            run = ChaosRun(chaos_report_dir, platform=chaos_platform, scenario=request.node.nodeid,
                           options=s.options, overwrite=True)
            runs.append(run)
            run.start(s.job)
        return run

    yield start
    for run in runs:
        run.verdict = _verdict_of(request.node)
        run.close()
        _record_metrics(request.node, run)
        brains = run.split_brains()
        if brains:  # an invariant, whatever the test asserted: fail it (at teardown)
            pytest.fail(f"split brain in {run.report_dir}: " + "; ".join(b.describe() for b in brains))
        died = [c.reason for c in run.verdict.checks if c.name == "watcher" and c.ok is False] if run.verdict else []
        if died:    # part of the run went unobserved: what the test asserted stands on less than it saw
            pytest.fail(f"a watcher died in {run.report_dir}: " + "; ".join(died))


@pytest.fixture
def run_hypothesis(request: pytest.FixtureRequest, chaos_platform: str,
                   chaos_report_dir: Path) -> Callable[..., ChaosRun]:
    """Factory: ``run_hypothesis("kill-node", replace_lost_nodes=False, last_call_timeout=3)``
    runs the catalog's hypothesis (elastic_chaos.hypotheses) on this session's ``--platform``,
    exactly as ``elastic-chaos run kill-node`` does, and fails the test with the
    verdict's checks when it does not hold. ``expect_failed={"job-survives"}`` turns
    it round: the test passes only when the hypothesis fails, on those checks (a
    scenario showing what a job does NOT survive). A fault the platform cannot make
    here skips the test with the reason. Returns the closed run (its timeline,
    recoveries, samples and verdict). One run per test.
    """
    runs: list[ChaosRun] = request.node.stash.setdefault(RUNS_KEY, [])

    def run(name: str, *, expect_failed: Iterable[str] | None = None, **values: Any) -> ChaosRun:
        from elastic_chaos.errors import FaultUnavailable
        from elastic_chaos.hypotheses.execute import execute
        if runs:
            raise RuntimeError("run_hypothesis runs one hypothesis per test")
        values = from_rootdir(request.config, chaos_platform, {**session_values(request.config, chaos_platform),
                                                               **values})
        try:
            with _setup_errors_fail_the_test():
                result = execute(name, values, report_dir=chaos_report_dir, platform=chaos_platform,
                                 scenario=request.node.nodeid, on_start=runs.append, overwrite=True)
        except FaultUnavailable as exc:
            pytest.skip(f"{exc} (--platform {chaos_platform})")
        _record_metrics(request.node, result)
        verdict = result.verdict
        assert verdict is not None
        listing = "\n".join(f"  {line}" for line in verdict.reasons)
        if expect_failed is not None:
            expected = set(expect_failed)
            if verdict.passed or not expected <= verdict.failed_checks():
                held = "it held" if verdict.passed else f"it failed on {sorted(verdict.failed_checks())}"
                pytest.fail(f"hypothesis {name} was expected to fail on {sorted(expected)}; {held}:\n{listing}",
                            pytrace=False)
        elif verdict.outcome is Outcome.TOOLKIT_ERROR:
            pytest.fail(f"elastic-chaos itself failed in {name}, so the run says nothing about the hypothesis "
                        f"(report: {result.report_dir}):\n{listing}", pytrace=False)
        elif verdict.outcome is Outcome.NOT_STEADY:
            pytest.fail(f"{name}: the job was not steady before the fault, so no fault was injected and nothing "
                        f"was tested (report: {result.report_dir}):\n{listing}", pytrace=False)
        elif verdict.outcome is Outcome.JOB_FINISHED:
            pytest.fail(f"{name}: the job finished its training on its own before its fault could be judged, so "
                        f"nothing was tested (report: {result.report_dir}):\n{listing}", pytrace=False)
        elif not verdict.passed:
            pytest.fail(f"hypothesis {name} did not hold (report: {result.report_dir}):\n{listing}", pytrace=False)
        return result

    return run


def _failure_message(report: pytest.TestReport) -> str:
    """The assertion (or exception) that failed, without the source listing and the
    report sections appended below it."""
    crash: Any = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        where = f" ({crash.path}:{crash.lineno})" if getattr(crash, "path", None) else ""
        return str(message)[:4000] + where
    return report.longreprtext[:4000]


def _verdict_of(item: pytest.Item) -> Verdict:
    reports = item.stash.get(_REPORT_KEY, {})
    call = reports.get("call")
    if call is None:
        setup = reports.get("setup")
        reason = _failure_message(setup) if setup is not None and setup.failed else "test did not run"
        return Verdict.failed(reason, check="test")
    if call.passed:
        v = Verdict()
        v.require(True, "every assertion of the scenario held", check="test")
        return v
    if call.skipped:
        return Verdict.failed("skipped", check="test")
    return Verdict.failed(_failure_message(call), check=_check_of(item.stash.get(_ERROR_KEY, {}).get("call")))


def _check_of(exc: BaseException | None) -> str:
    """A test failed by the toolkit's own error (a watcher died, a fault it could not inject, a
    bad option) is that error's check (elastic_chaos.runner.endings.check_of), never a verdict on the
    hypothesis; an assertion, or any error of the scenario's own code, is the test's."""
    from elastic_chaos.errors import ChaosError
    from elastic_chaos.runner.endings import check_of
    check = check_of(exc) if isinstance(exc, ChaosError) else "run"
    return "test" if check == "run" else check
