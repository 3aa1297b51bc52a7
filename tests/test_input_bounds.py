"""Every input bounded where it is declared, and checked before a run starts (issue 25's table).

One test per row of the issue's table that is about input: each ran and failed before the
fix (a traceback, a silent success, a run that never ended or wrote where it should not),
and passes now. None of them starts a job: a bad input is refused before one would start.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import pkgutil
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import elastic_chaos
from elastic_chaos.errors import SpecError
from elastic_chaos.options import declared

RUNS = Path(__file__).parent / "fixtures" / "runs"

def cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, **(env or {})})


def assert_usage_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, no traceback, and the error said in one line that holds each needle."""
    assert out.returncode == 2, (out.returncode, out.stdout[-2000:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr
    error = [line for line in out.stderr.splitlines() if "error:" in line]
    assert error, out.stderr
    for needle in needles:
        assert needle in error[-1], out.stderr


def toolkit_modules(path: list[str], prefix: str) -> list[str]:
    """Every module under ``path``, but ``__main__``s and the old names' shims (which warn on import)."""
    out: list[str] = []
    for info in pkgutil.iter_modules(path, prefix):
        if info.name.endswith(("__main__", "._compat")):
            continue
        out.append(info.name)
        if info.ispkg:
            out += toolkit_modules(importlib.import_module(info.name).__path__, info.name + ".")
    return out


def option_classes() -> list[type]:
    """Every dataclass of the toolkit that declares options."""
    found: dict[type, None] = {}
    for name in toolkit_modules(elastic_chaos.__path__, "elastic_chaos."):
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__ \
                    and declared(obj):
                found[obj] = None
    return list(found)


# -- numbers: each with its range, in its one declaration -----------------------------------
def test_every_declared_number_has_an_upper_bound_inside_what_timers_accept():
    unbounded, too_long = [], []
    for cls in option_classes():
        for d in declared(cls):
            if d.base_type not in (int, float):
                continue
            where = f"{cls.__module__}.{cls.__name__}.{d.name}"
            if d.meta.maximum is None:
                unbounded.append(where)
            elif d.meta.units == "s" and d.meta.maximum > threading.TIMEOUT_MAX:
                too_long.append(where)
    assert not unbounded, f"numbers without a maximum: {unbounded}"
    assert not too_long, f"seconds beyond threading.TIMEOUT_MAX: {too_long}"


def test_a_range_is_shown_in_help():
    out = cli("run", "straggler", "--help")
    assert out.returncode == 0
    assert "> 0 and <= 86400" in " ".join(out.stdout.split())


def test_straggler_duration_1e12_is_refused_with_its_range(tmp_path):
    # before: accepted; an OverflowError traceback from a timer thread mid-run, never ending by itself
    out = cli("run", "straggler", "--duration", "1e12", "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "--duration", "<= 86400")
    assert not (tmp_path / "r").exists()


def test_timeouts_termination_grace_1e308_is_refused():
    # before: accepted, and a 300-digit number printed
    assert_usage_error(cli("timeouts", "--termination-grace", "1e308"), "--termination-grace", "<=")


def test_a_node_range_beyond_what_a_job_may_ask_is_refused(tmp_path):
    assert_usage_error(cli("run", "kill-node", "--nodes", "1:99999999", "--report-dir", str(tmp_path / "r")),
                       "nodes", "1024")


# -- traces ------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["1e-300", "nan", "inf", "-1", "0"])
def test_trace_compress_out_of_range_is_refused(value):
    # before: 'nan'/'inf' printed a "+nan s" schedule, exit 0; 1e-300 was accepted
    assert_usage_error(cli("trace", "spot-3", "--compress", value), "--compress")


def test_run_replay_compress_1e_300_is_refused_before_a_run(tmp_path):
    out = cli("run", "replay", "--compress", "1e-300", "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "--compress")
    assert not (tmp_path / "r").exists()


def test_a_trace_that_is_not_utf8_names_its_line(tmp_path):
    # before: a UnicodeDecodeError traceback, exit 1
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"offset_s,node\n0,a\n5,\xff\xfeb\n")
    assert_usage_error(cli("trace", str(bad)), f"{bad}:3", "UTF-8")


def test_run_replay_with_a_trace_that_is_not_utf8_is_refused_before_a_run(tmp_path):
    # before: a traceback, exit 1, and a report folder with a FAILED verdict that `audit` counted
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"offset_s,node\n0,\xff\n")
    out = cli("run", "replay", "--trace", str(bad), "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, f"{bad}:2", "UTF-8")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text, needle", [
    ("offset_s\n0\n1e300\n", "offset_s '1e300'"),
    ("time\n1e20\n", "time '1e20'"),
    ("time\n0\n1e9\n", "spans"),
])
def test_a_trace_beyond_any_sane_span_is_refused(tmp_path, text, needle):
    # before: accepted; `run replay` injected one preemption, then waited on a span of 3.3e18 s
    from elastic_chaos.faults.trace import parse_trace
    with pytest.raises(SpecError, match=needle):
        parse_trace(text, "t.csv")


def test_run_replay_refuses_a_trace_whose_compressed_span_exceeds_a_day(tmp_path):
    trace = tmp_path / "long.csv"
    trace.write_text("offset_s\n0\n3000000\n")                          # 34.7 days: 1.16 days at 30x
    out = cli("run", "replay", "--trace", str(trace), "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "--compress")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("where", ["dir", "/proc/x.csv"])
def test_trace_output_that_cannot_be_written_is_a_usage_error(tmp_path, where):
    # before: IsADirectoryError / FileNotFoundError tracebacks
    target = str(tmp_path) if where == "dir" else where
    assert_usage_error(cli("trace", "-o", target), "cannot write")


# -- the Pushgateway: checked before the run ----------------------------------------------
@pytest.mark.parametrize("url, needle", [
    ("http://localhost:abc", "port"),
    ("", "empty"),
    ("ftp://localhost:9091", "http"),
    ("http://:9091", "host"),
    ("127.0.0.1:1", "cannot reach"),
])
def test_a_bad_pushgateway_is_refused_before_the_run(tmp_path, url, needle):
    # before: a run of 32 s PASSED, then an InvalidURL traceback, exit 1; '' pushed nothing, exit 0;
    # 127.0.0.1:1 and ftp:// were refused only after the whole run
    out = cli("run", "kill-node", "--pushgateway", url, "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "--pushgateway", needle)
    assert not (tmp_path / "r").exists()


def test_report_pushgateway_is_checked_before_rendering(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(RUNS / "kill-node-replaced", folder)
    out = cli("report", str(folder), "--no-png", "--pushgateway", "http://localhost:abc")
    assert_usage_error(out, "--pushgateway", "port")
    assert not (folder / "report.html").exists()


# -- report folders: ours or refused ---------------------------------------------------------
def test_the_root_folder_is_never_a_report_folder():
    # before: `run --report-dir /` ran and wrote report.json, nodes/, etcd-data/ into /
    from elastic_chaos.runner.folder import prepare
    for overwrite in (False, True):
        with pytest.raises(SpecError, match="never a report folder"):
            prepare(Path("/"), overwrite=overwrite)


def test_home_and_its_parents_are_never_report_folders(tmp_path, monkeypatch):
    from elastic_chaos.runner.folder import prepare
    home = tmp_path / "users" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for target in (home, home.parent):
        for overwrite in (False, True):
            with pytest.raises(SpecError, match="never a report folder"):
                prepare(target, overwrite=overwrite)
    assert list(home.iterdir()) == []


def test_a_folder_of_other_files_is_refused_even_with_overwrite(tmp_path):
    # before: the run's files were mixed in with the user's
    from elastic_chaos.runner.folder import prepare
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "train.py").write_text("print('mine')\n")
    for overwrite in (False, True):
        with pytest.raises(SpecError, match="train.py"):
            prepare(mine, overwrite=overwrite)
    assert [p.name for p in mine.iterdir()] == ["train.py"]


def test_run_into_home_is_exit_2_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("# mine\n")
    out = cli("run", "kill-node", "--report-dir", str(home), "--overwrite", env={"HOME": str(home)})
    assert_usage_error(out, "never a report folder")
    assert [p.name for p in home.iterdir()] == [".bashrc"]


# -- a script that prints nothing ----------------------------------------------------------
def test_a_script_that_printed_nothing_is_told_from_one_whose_lines_did_not_match(tmp_path):
    # before: "no line matched --progress-regex; compare it with nodes/*.log" when it printed nothing at all
    from elastic_chaos.runner.run import ChaosRun
    from elastic_chaos.spec import JobSpec, Observation
    from elastic_chaos.watchers.script_lines import ScriptLines
    observe = Observation(progress_regex=r"it=(?P<step>\d+)")
    with ChaosRun(tmp_path / "r") as run:
        run.job = JobSpec(script=("train.py",), observe=observe)
        run.script_lines = ScriptLines(observe)
        assert "printed nothing" in run.last_progress() and "matched" not in run.last_progress()
        run.script_lines.feed("node-0", "loss 0.3", 1.0)
        assert "no line matched --progress-regex" in run.last_progress()
        run.verdict = None


# -- kubeconfig: one validating reader, before the run --------------------------------------
@pytest.mark.parametrize("content, needle", [
    (b"\xff\xfe not utf-8", "UTF-8"),
    (b"clusters: [\n  - oops\n", "line"),
    (b"- a list\n", "not a kubeconfig"),
    (b"apiVersion: v1\nclusters: []\ncontexts: []\nusers: []\ncurrent-context: prod\n", "context 'prod'"),
])
def test_a_kubeconfig_that_cannot_be_used_is_refused_with_file_and_reason(tmp_path, content, needle):
    pytest.importorskip("yaml")
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    out = cli("run", "kill-node", "--platform", "kubernetes", "--kubeconfig", str(path), "--report-dir",
              str(tmp_path / "r"))
    assert_usage_error(out, str(path), needle)
    assert not (tmp_path / "r").exists()


def test_a_kubeconfig_that_is_a_folder_is_refused(tmp_path):
    out = cli("run", "kill-node", "--platform", "kubernetes", "--kubeconfig", str(tmp_path), "--report-dir",
              str(tmp_path / "r"))
    assert_usage_error(out, str(tmp_path), "not a file")
