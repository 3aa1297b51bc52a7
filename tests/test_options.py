"""Options declared once (elastic_chaos.options): one declaration gives the flag, the keyword and the check."""
from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.faults.catalog import faults_for
from elastic_chaos.hypotheses.api import TrialOptions, settings
from elastic_chaos.hypotheses.catalog import HYPOTHESES
from elastic_chaos.options import add_arguments, declared, given, option, validate
from elastic_chaos.platforms import PLATFORMS, platform_class
from elastic_chaos.spec import JobSpec, job_from_options


@dataclasses.dataclass(frozen=True)
class Knobs:
    seconds: float = option(1.0, "a duration", above=0, units="s")
    count: int = option(3, "a count", minimum=1)
    maybe: float | None = option(None, "an optional one", minimum=0)

    def __post_init__(self) -> None:
        validate(self)


@pytest.mark.parametrize("value", [0, -1, math.nan, math.inf])
def test_a_duration_must_be_finite_and_positive(value):
    with pytest.raises(SpecError, match=r"seconds .*must be|seconds .*not a finite number"):
        Knobs(seconds=value)


def test_a_count_must_be_whole():
    with pytest.raises(SpecError, match="not a whole number"):
        Knobs(count=2.5)
    assert Knobs(count=2.0).count == 2 and isinstance(Knobs(count=2.0).count, int)


def test_the_command_line_takes_the_same_bounds_and_leaves_defaults_to_the_declaration(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser, Knobs)
    assert given(parser.parse_args([]), Knobs) == {}                 # nothing given: the dataclass decides
    assert given(parser.parse_args(["--seconds", "2.5", "--maybe", "none"]), Knobs) == {"seconds": 2.5,
                                                                                        "maybe": None}
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--count", "0"])
    assert exit_.value.code == 2 and "must be a whole number >= 1" in capsys.readouterr().err


def test_the_job_is_built_from_the_same_names_the_cli_and_fixtures_use():
    job = job_from_options({"nodes": "1:3", "rdzv_backend": "c10d", "rdzv_preset": "fast", "last_call_timeout": 3,
                            "pg_timeout_s": 5.0, "env": {"A": "1"}, "trainer_args": ["--x"]})
    assert job.rdzv.backend.value == "c10d" and job.rdzv.last_call_timeout == 3   # the knob over the preset
    assert job.rdzv.keep_alive_max_attempt == 4 and job.pg_timeout_s == 5.0        # the preset, and --pg-timeout
    assert job.env == (("A", "1"),) and job.trainer_args == ("--x",)


def test_an_unknown_name_lists_what_is_accepted():
    with pytest.raises(SpecError, match=r"unknown option\(s\) \['chekpoint_every'\]; local accepts: "
                                        r".*checkpoint_every"):
        settings(HYPOTHESES["kill-node"], {"chekpoint_every": 5}, "local")


def test_a_hypothesis_refuses_a_value_that_contradicts_what_it_needs():
    with pytest.raises(SpecError, match="needs rdzv_backend='c10d'"):
        settings(HYPOTHESES["store-host-loss"], {"rdzv_backend": "etcd-v2"}, "local")


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
def test_a_platform_option_redeclared_by_a_subclass_keeps_its_declaration(platform):
    # a field given a new default without option() would drop its flag and its check
    options = platform_class(platform).Options
    mine = {d.name for d in declared(options)}
    for base in options.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            assert {d.name for d in declared(base)} <= mine, f"{options.__name__} lost a declaration of {base}"


def test_no_two_option_classes_of_a_hypothesis_declare_the_same_name():
    job = {d.name for d in declared(JobSpec)}
    for h in HYPOTHESES.values():
        for platform in ("local", "kubernetes"):
            if h.fault is not None and not faults_for(platform).get(h.fault):
                continue                      # a pod deletion is made on clusters only
            names: list[str] = [d.name for c in h.option_classes(platform) for d in declared(c)]
            assert len(names) == len(set(names)) and not set(names) & job, (h.name, platform)
    assert {d.name for d in declared(TrialOptions)} == {"steady_steps", "target", "timeout_s"}


def test_the_rendezvous_backend_and_the_process_group_backend_are_two_options():
    from elastic_chaos.cli.main import build_parser
    from elastic_chaos.cli.run import option_values
    words = ["run", "kill-node", "--rdzv-backend", "c10d", "--backend", "gloo"]
    values = option_values(build_parser(words).parse_args(words))
    assert values["rdzv_backend"] == "c10d" and values["backend"] == "gloo"
    job = settings(HYPOTHESES["kill-node"], values, "local").job
    assert job.rdzv.backend.value == "c10d" and job.backend is not None and job.backend.value == "gloo"
