"""``elastic-chaos run FAULT [options] -- train.py [args]``: a user's own script.

Everything after ``--`` is the training command torchrun runs on every node,
unchanged. These options say how to observe it when it does not report
through ``trainer.progress`` (its log lines, its checkpoint file), where it
runs (a workdir shared by all nodes), and what to force so a GPU script runs
in CPU CI (the process-group backend, environment variables). Patterns are
checked while the command line is parsed: a bad one is a usage error (exit 2)
before anything starts.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from chaos.errors import SpecError
from chaos.spec import Observation, locate_script, step_regex

HELP = """Your own training script: put it and its arguments after `--`; torchrun runs it
on every node exactly as you would. Without `--` the reference trainer runs.
See README "Test your own training script" and docs/INTEGRATE.md."""


def _pattern(option: str) -> Any:
    def check(value: str) -> str:
        try:
            step_regex(value, option)
        except SpecError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value
    return check


def _env_pair(value: str) -> tuple[str, str]:
    key, sep, val = value.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise argparse.ArgumentTypeError(f"{value!r} is not KEY=VALUE (e.g. --env NCCL_DEBUG=INFO)")
    return key, val


def add_script_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("your own training script (after --)", HELP)
    g.add_argument("--progress-regex", metavar="REGEX", type=_pattern("--progress-regex"),
                   help=r"regex with a named group 'step' matched against every line a node prints; "
                        r"each match is a step, e.g. 'epoch (?P<step>\d+)'")
    g.add_argument("--checkpoint", metavar="PATH",
                   help="file or directory the script saves checkpoints to, relative to --workdir; "
                        "each replacement is a checkpoint event")
    g.add_argument("--resume-regex", metavar="REGEX", type=_pattern("--resume-regex"),
                   help="regex (named group 'step') for the line the script prints when it restores; "
                        "without it the resumed step is inferred from the first progress after a restart")
    g.add_argument("--unit", default="step",
                   help="what the script's counter counts: step, iteration, epoch (default step); "
                        "--steady-steps and --checkpoint-every are in this unit too")
    g.add_argument("--workdir", type=Path,
                   help="the job's working directory, shared by all nodes like EFS/FSx; the script runs "
                        "in it (default: a fresh workdir/ in the report folder)")
    g.add_argument("--backend", choices=["gloo", "nccl"],
                   help="force the process-group backend: a script that hard-codes nccl runs on gloo "
                        "(CPU) through trainer.launch; the reference trainer's --backend")
    g.add_argument("--env", action="append", default=[], type=_env_pair, metavar="KEY=VALUE",
                   help="set an environment variable on every node (repeatable)")
    p.set_defaults(script=None)


def split_script(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run ... -- train.py --lr 1`` -> (the toolkit's words, the script's); the
    script is None without ``--``. Only ``run`` takes a script: for any other
    command the words are left as they are."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "run" or "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def script_fields(args: argparse.Namespace) -> dict[str, Any]:
    """ExperimentOptions fields from the parsed options (SpecError for what does not fit)."""
    observe = Observation(progress_regex=args.progress_regex, checkpoint=args.checkpoint,
                          resume_regex=args.resume_regex, unit=args.unit)
    if args.script is None:
        if observe.active:
            raise SpecError("--progress-regex, --resume-regex and --checkpoint observe your own script: "
                            "give it after `--` (e.g. `-- train.py --epochs 10`); the reference trainer "
                            "reports through trainer.progress")
        script: tuple[str, ...] = ()
    else:
        script = locate_script(args.script)
    return {"script": script, "observe": observe,
            "workdir": str(args.workdir.expanduser().resolve()) if args.workdir else None,
            "backend": args.backend, "env": tuple(args.env)}
