"""Every command's options and every file reader, fuzzed (issue 25, item 2; the `hypothesis` library).

The only allowed outcomes: exit 2 with a one-line message (no traceback), or a bounded answer
(exit 0, or 1 where the command says "failed": a timeout ordering that cannot work, a report
without a passing verdict, an audit's regression). A reader raises only its documented error.

``run`` is fuzzed through ``--dry-run`` (elastic_chaos.hypotheses.dryrun): the same path ``execute``
takes up to the point where a job would start (the options sorted and checked, the trace read,
the kubeconfig read, the fault built, the Pushgateway reached, the report folder's refusals),
so no job ever starts here. The commands run in this process (elastic_chaos.cli.main.main), so each
example takes milliseconds; examples are derandomized (the same ones on every CI run) and few
enough that the whole file stays within seconds of the fast suite's budget.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import signal
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from elastic_chaos.cli.main import main
from elastic_chaos.errors import SpecError
from elastic_chaos.events import read_timeline
from elastic_chaos.faults.trace import read_trace
from elastic_chaos.hypotheses.api import TrialOptions
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.options import declared
from elastic_chaos.platforms import platform_option_classes
from elastic_chaos.reporting.load import load_run, read_report_json
from elastic_chaos.reporting.schema import ReportUnreadable
from elastic_chaos.spec import JOB_OPTION_CLASSES

RUNS = Path(__file__).parent / "fixtures" / "runs"
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.filter_too_much])


@pytest.fixture(autouse=True)
def _signals_restored() -> Iterator[None]:
    """main() installs its SIGINT/SIGTERM handlers; put pytest's back after each test."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def cli(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``elastic-chaos ARGV`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:   # argparse's own refusal: exit 2 with its usage and one error line
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def assert_clean(result: tuple[int, str, str], allowed: tuple[int, ...]) -> None:
    """Exit in ``allowed``; never a traceback; exit 2 says what is wrong in exactly one line, its last."""
    code, out, err = result
    event(f"exit {code}")   # --hypothesis-show-statistics shows how often each outcome was reached
    assert code in allowed, (code, out[-2000:], err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out, err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        errors = [line for line in lines if "error:" in line]
        assert len(errors) == 1 and lines[-1] == errors[0], err


# -- values a user may type ------------------------------------------------------------------
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_number = st.one_of(
    st.integers(0, 120).map(str), st.floats(0.01, 600).map(lambda v: f"{v:.3g}"),   # mostly sane values
    st.sampled_from(["1e12", "1e308", "1e-300", "-1", "0", "-0", "nan", "inf", "-inf", "1e20", "3", "0.5", "60",
                     "2.5", "1_000", "0x10", "", " ", "none", "None", "86401", "9" * 400]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**30, 10**30).map(str),
    _text)
_nodes = st.one_of(st.sampled_from(["1:2", "2", "0:3", "3:1", "1:1025", "1:99999999999", "a:b", "1:2:3", ""]),
                   _text)


def _cli_options(classes: list[type]) -> list[tuple[str, Any]]:
    """(flag, base type) of every declared option the command line offers."""
    seen: dict[str, Any] = {}
    for cls in classes:
        for d in declared(cls):
            if d.meta.cli and d.name != "node":
                seen.setdefault(d.flag, d.base_type)
    return list(seen.items())


def _value_for(base: Any) -> st.SearchStrategy[str]:
    if base in (int, float):
        return _number
    return st.one_of(_text, _number)


# -- run, through --dry-run ---------------------------------------------------------------------
RUN_FAULTS = ["kill-node", "straggler", "hung-rank", "partition", "etcd-outage", "spot-interruption", "replay",
              "repeated", "worker-crash"]
_gateways = st.one_of(st.sampled_from(["http://localhost:abc", "", "ftp://127.0.0.1:9091", "http://:9091",
                                       "127.0.0.1:1", "http://127.0.0.1:0", "http://127.0.0.1:99999",
                                       "https://[::1", "http://127.0.0.1:1/metrics/job", "localhost"]),
                      st.builds(lambda s, p: f"{s}127.0.0.1:{p}", st.sampled_from(["", "http://", "https://", "x://"]),
                                _text))


@settings(FUZZ, max_examples=150)
@given(data=st.data())
def test_run_options_end_in_a_plan_or_one_clear_error(tmp_path, data):
    fault = data.draw(st.sampled_from(RUN_FAULTS), label="fault")
    h = get(fault)
    options = _cli_options([*JOB_OPTION_CLASSES, TrialOptions, *h.option_classes("local")[1:],
                            *platform_option_classes("local")])
    argv = ["run", fault]
    for flag, base in data.draw(st.lists(st.sampled_from(options), max_size=3, unique=True), label="flags"):
        argv += [flag] if base is bool else [flag, data.draw(_value_for(base), label=flag)]
    if data.draw(st.integers(0, 3), label="nodes?") == 0:
        argv += ["--nodes", data.draw(_nodes, label="nodes")]
    if fault == "replay" and data.draw(st.booleans(), label="trace?"):
        trace = tmp_path / "trace.csv"
        trace.write_bytes(data.draw(_trace_bytes, label="trace bytes"))
        argv += ["--trace", str(trace)]
    if data.draw(st.integers(0, 4), label="gateway?") == 0:
        argv += ["--pushgateway", data.draw(_gateways, label="gateway")]
    report_dir = data.draw(st.sampled_from(["new"] * 6 + ["file", "root", "others", "used"]), label="report dir")
    target = _report_dir(tmp_path, report_dir)
    existed = target.exists()
    argv += ["--report-dir", str(target), "--dry-run"]
    if data.draw(st.booleans(), label="overwrite?"):
        argv.append("--overwrite")
    code, out, err = result = cli(*argv)
    assert_clean(result, (0, 2))
    if code == 0:
        assert "nothing was started" in out
    assert target.exists() == existed                       # a dry run creates, deletes and writes nothing


def _report_dir(tmp: Path, kind: str) -> Path:
    target = tmp / f"rd-{kind}"
    if kind == "file" and not target.exists():
        target.write_text("a file")
    elif kind == "root":
        return Path("/")
    elif kind == "others":
        target.mkdir(exist_ok=True)
        (target / "train.py").write_text("print('mine')\n")
    elif kind == "used":
        target.mkdir(exist_ok=True)
        (target / "report.json").write_text("{}")
        (target / "notes.txt").write_text("mine")
    return target


# -- trace ------------------------------------------------------------------------------------
_csv_cell = st.one_of(_number, _text, st.sampled_from(["2025-03-02T14:05:11Z", "1740924371", "9999-12-31T23:59:59",
                                                        "0001-01-01T00:00:00", '"quoted,cell"', '"open']))
_trace_text = st.builds(
    lambda header, rows: "\n".join([header, *(",".join(r) for r in rows)]),
    st.sampled_from(["offset_s,node,group", "time,node,group", "time", "offset_s", "when,node", "", "# c",
                     "TIME, Node", "offset_s,offset_s"]),
    st.lists(st.lists(_csv_cell, min_size=0, max_size=4), max_size=6))
_trace_bytes = st.one_of(_trace_text.map(lambda t: t.encode("utf-8")), st.binary(max_size=64),
                         _trace_text.map(lambda t: t.encode("utf-8") + b"\xff\xfe\n1,a"),
                         st.just(b"\xef\xbb\xbfoffset_s\n1\n"), st.just(b"offset_s\n" + b"1\n" * 10_001))


@FUZZ
@given(data=st.data())
def test_trace_ends_in_a_schedule_or_one_clear_error(tmp_path, data):
    argv = ["trace"]
    source = data.draw(st.sampled_from(["file", "bundled", "missing", "folder", "generate"]), label="source")
    if source == "file":
        path = tmp_path / "t.csv"
        path.write_bytes(data.draw(_trace_bytes, label="bytes"))
        argv.append(str(path))
    elif source == "bundled":
        argv.append(data.draw(st.sampled_from(["spot-3", "k8s-burst", "k8s-burst.csv"])))
    elif source == "missing":
        argv.append(str(tmp_path / "nope.csv"))
    elif source == "folder":
        argv.append(str(tmp_path))
    flags = ["--compress", "--max-nodes", "--bursts", "--burst-size", "--burst-window", "--burst-gap", "--seed",
             "--replay-by"]
    for flag in data.draw(st.lists(st.sampled_from(flags), max_size=3, unique=True), label="flags"):
        argv += [flag, data.draw(_number if flag != "--replay-by" else st.one_of(
            st.sampled_from(["node", "group", "any"]), _text), label=flag)]
    if source == "generate" and data.draw(st.booleans(), label="-o?"):
        out = data.draw(st.sampled_from(["file", "folder", "proc", "under-file"]), label="-o")
        (tmp_path / "blocker").write_text("x")
        argv += ["-o", str({"file": tmp_path / "out.csv", "folder": tmp_path, "proc": Path("/proc/x.csv"),
                            "under-file": tmp_path / "blocker" / "x.csv"}[out])]
    assert_clean(cli(*argv), (0, 2))


def test_every_non_utf8_byte_in_a_trace_is_named_by_its_line(tmp_path):
    for n, bad in enumerate([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]):
        path = tmp_path / f"t{n}.csv"
        path.write_bytes(b"offset_s,node\n0,a\n1," + bad + b"\n")
        with pytest.raises(SpecError, match=rf"{path}:3: not UTF-8"):
            read_trace(path)


# -- timeouts ---------------------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_timeouts_end_in_a_table_or_one_clear_error(data):
    from elastic_chaos.analysis.link_order import Degradation
    from elastic_chaos.analysis.timeouts import Surroundings
    options = _cli_options([*JOB_OPTION_CLASSES, Surroundings, Degradation])
    argv = ["timeouts"]
    for flag, base in data.draw(st.lists(st.sampled_from(options), max_size=4, unique=True), label="flags"):
        argv += [flag] if base is bool else [flag, data.draw(_value_for(base), label=flag)]
    if data.draw(st.booleans(), label="preset?"):
        argv += ["--rdzv-preset", data.draw(st.sampled_from(["fast", "default", "slow-network", "bogus"]))]
    assert_clean(cli(*argv), (0, 1, 2))


# -- report files: report.json, timeline.jsonl, kubeconfig ----------------------------------------
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(), _text)
_json = st.recursive(_scalar, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(_text, inner, max_size=3)), max_leaves=10)
_real_report = json.loads((RUNS / "kill-node-replaced" / "report.json").read_text())
_keys = sorted(_real_report)


def _mutated(data: st.DataObject) -> dict[str, Any]:
    """A real report.json with a few fields (top level or a verdict/fault field) replaced."""
    report = json.loads(json.dumps(_real_report))
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        where = data.draw(st.sampled_from(["top", "verdict", "fault", "metrics"]), label="where")
        value = data.draw(_json, label="value")
        faults = report.get("faults")
        fault = faults[0] if isinstance(faults, list) and faults and isinstance(faults[0], dict) else None
        if where == "top":
            report[data.draw(st.sampled_from(_keys), label="key")] = value
        elif where == "verdict" and isinstance(report.get("verdict"), dict):
            report["verdict"][data.draw(st.sampled_from(["passed", "checks", "reasons", "outcome"]))] = value
        elif where == "fault" and fault is not None:
            fault[data.draw(st.sampled_from(["kind", "target", "injected_at", "hit", "metrics"]))] = value
        elif where == "metrics" and fault is not None and isinstance(fault.get("metrics"), dict):
            fault["metrics"][data.draw(st.sampled_from(
                ["regain_s", "lost_steps", "phases", "not_applicable", "notes", "path"]))] = value
    return report


def _report_bytes(data: st.DataObject) -> bytes:
    kind = data.draw(st.sampled_from(["mutated", "json", "binary", "deep", "nan"]), label="report kind")
    if kind == "mutated":
        return json.dumps(_mutated(data)).encode()
    if kind == "json":
        return json.dumps(data.draw(_json)).encode()
    if kind == "deep":
        depth = data.draw(st.sampled_from([900, 1100, 100_000]), label="depth")
        return b"[" * depth + b"]" * depth
    if kind == "nan":
        return json.dumps({**_real_report, "goodput": math.nan}).encode()
    return data.draw(st.binary(max_size=64), label="bytes")


def test_report_json_reader_raises_only_its_error(tmp_path):
    @FUZZ
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        path = tmp_path / "report.json"
        path.write_bytes(_report_bytes(data))
        try:
            assert isinstance(read_report_json(path), dict)
        except ReportUnreadable as exc:
            assert str(path) in str(exc)
    check()


@FUZZ
@given(data=st.data())
def test_report_and_audit_of_fuzzed_folders_end_cleanly(tmp_path_factory, data):
    root = tmp_path_factory.mktemp("fuzz")
    good = root / "runs" / "good"
    shutil.copytree(RUNS / "kill-node-replaced", good)
    bad = root / "runs" / "bad"
    shutil.copytree(RUNS / "kill-node-shrink", bad)
    (bad / "report.json").write_bytes(_report_bytes(data))
    if data.draw(st.booleans(), label="timeline too?"):
        (bad / "timeline.jsonl").write_bytes(data.draw(st.sampled_from([
            b"[" * 100_000 + b"\n", b"\xff\xfe\n", b'{"t": 1e400, "source": "x"}\n', b""]), label="timeline"))
    assert_clean(cli("report", str(bad), "--no-png"), (0, 1, 2))
    flags = []
    for flag in data.draw(st.lists(st.sampled_from(["--tolerance", "--min-delta", "--score-half"]), max_size=2,
                                   unique=True), label="audit flags"):
        flags += [flag, data.draw(_number, label=flag)]
    code, out, err = result = cli("audit", str(root / "runs"), "--html", str(root / "audit.html"), *flags)
    assert_clean(result, (0, 1, 2) if flags else (0, 1))   # the good run is audited whatever the bad one holds
    if code != 2:
        assert str(good) in (root / "audit.json").read_text()


def test_the_typed_loaders_raise_only_spec_errors(tmp_path):
    @FUZZ
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        folder = tmp_path / "run"
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        (folder / "report.json").write_bytes(_report_bytes(data))
        lines = data.draw(st.lists(st.one_of(_json.map(json.dumps), _text), max_size=4), label="timeline")
        (folder / "timeline.jsonl").write_text("\n".join(lines), encoding="utf-8")
        read_timeline(folder / "timeline.jsonl")             # never raises for what a line holds
        try:
            load_run(folder, strict=True)
        except SpecError:
            pass
    check()


def test_kubeconfig_reader_raises_only_spec_errors(tmp_path):
    pytest.importorskip("yaml")
    from elastic_chaos.platforms.kubernetes.kubeconfig import check as read_kubeconfig
    yaml_like = st.one_of(
        st.binary(max_size=64),
        st.text(alphabet=string.printable, max_size=80).map(str.encode),
        _json.map(lambda v: json.dumps(v).encode()),
        st.builds(lambda ctx, cur: (f"apiVersion: v1\nclusters: []\nusers: []\ncontexts:\n- name: {ctx}\n"
                                    f"current-context: {cur}\n").encode(), _text, _text),
        st.just(b"[" * 100_000), st.just(b"a: &a [*a]\n"))

    @FUZZ
    @given(content=yaml_like, context=st.one_of(st.none(), _text))
    def check(content: bytes, context: str | None) -> None:
        path = tmp_path / "kubeconfig"
        path.write_bytes(content)
        try:
            assert isinstance(read_kubeconfig(path, context or None), dict)
        except SpecError as exc:
            assert str(path) in str(exc) or "kubernetes client" in str(exc)
    check()
