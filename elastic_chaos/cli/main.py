"""``elastic-chaos``: the command line. One module per subcommand.

Exit codes CI can trust: 0 the hypothesis held, 1 it failed, 2 usage or setup
error (bad option, missing etcd, a used report folder, ...), 3 not steady, 4 the
toolkit failed (for ``run``: a fault it could not inject, a watcher that died; for
any command: a bug, shown with its traceback), 130 interrupted. A ChaosError is
printed as a message, never as a traceback.

Ctrl-C or SIGTERM stops the run and everything it started; a second one during
that teardown is deferred, a third force-exits saying what may be left
(elastic_chaos.signals). The last line after an interruption is checked, not assumed.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback

from elastic_chaos.errors import ChaosError

EXIT_USAGE = 2
EXIT_TOOLKIT = 4
EXIT_BROKEN_PIPE = 141
"""As a shell reports a command a closed pipe stopped (128 + SIGPIPE)."""

EPILOG = r"""examples:
  elastic-chaos demo
  elastic-chaos run kill-node --nodes 1:2 --checkpoint-every 20 --no-replace
  elastic-chaos run kill-node --progress-regex 'it=(?P<step>\d+)' --checkpoint ckpt.pt -- train.py
  elastic-chaos faults
  elastic-chaos doctor
  elastic-chaos report reports/demo-20250101-120000
  elastic-chaos audit reports/ --baseline reports-last-release/
  elastic-chaos watch --etcd 127.0.0.1:2379 --run-id my-job --record reports/watch
  elastic-chaos reap                     # stop what a killed local run left running
  elastic-chaos trace --bursts 3 -o bursts.csv   # correlated preemptions for `run replay --trace`
  elastic-chaos manifest --platform kubernetes --job-kind pytorchjob --nodes 1:4
  elastic-chaos timeouts --rdzv-preset fast --backend nccl
  elastic-chaos scale --nodes 512 --rdzv-backend c10d --rdzv-preset fast   # what a 512-node rendezvous costs
  elastic-chaos cluster up   # a local 4-node Kubernetes cluster (root, no Docker)
  elastic-chaos compare-final ref/ckpt.pt run/ckpt.pt   # the final-state oracle: equal, or what diverged
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("elastic-chaos")
    except PackageNotFoundError:
        return "(not installed)"


def build_parser(words: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; ``words`` (the command line) lets ``run`` offer the options of the
    fault and platform it names."""
    from elastic_chaos.cli import (
        audit,
        cleanup,
        cluster,
        compare_final,
        demo,
        doctor,
        faults_cmd,
        gameday,
        manifest,
        reap,
        report_cmd,
        run,
        scale,
        timeouts,
        trace_cmd,
        watch,
    )

    parser = argparse.ArgumentParser(
        prog="elastic-chaos", description="Chaos testing for elastic PyTorch training.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.register(sub)
    run.register(sub, words[words.index("run") + 1:] if words and "run" in words else [])
    faults_cmd.register(sub)
    doctor.register(sub)
    report_cmd.register(sub)
    audit.register(sub)
    watch.register(sub)
    gameday.register(sub)
    cleanup.register(sub)
    reap.register(sub)
    manifest.register(sub)
    timeouts.register(sub)
    scale.register(sub)
    cluster.register(sub)
    trace_cmd.register(sub)
    compare_final.register(sub)
    return parser


def split_script(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``run ... -- train.py --lr 1`` -> (the toolkit's words, the script's); the
    script is None without ``--``. Only ``run`` takes a script: for any other
    command the words are left as they are."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command != "run" or "--" not in argv:
        return argv, None
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def main(argv: list[str] | None = None) -> int:
    words, script = split_script(list(sys.argv[1:] if argv is None else argv))
    try:
        parser = build_parser(words)
    except ChaosError as exc:
        print(f"elastic-chaos: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(words)
    if script is not None:
        args.script_argv = script  # `run ... -- train.py args`: the training command, untouched
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    from elastic_chaos import signals
    signals.install()  # Ctrl-C and `kill PID` stop the run and everything it started; teardown is not interrupted
    try:
        code: int = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe is caught below, and not in the interpreter's exit
        return code
    except ChaosError as exc:
        print(f"elastic-chaos: error: {exc}", file=sys.stderr)
        _say_leftovers(signals.leftovers())
        return _exit_code_of(args.command, exc)
    except BrokenPipeError:
        # the reader of our output went away (`elastic-chaos scale ... | head`): not a bug, nothing to say on a
        # closed pipe; what the command started was stopped as the error unwound. Python would otherwise report
        # the same error again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        _say_leftovers(signals.leftovers())
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        left = signals.leftovers()
        if left:
            print("elastic-chaos: interrupted", file=sys.stderr)
            _say_leftovers(left)
        else:
            print("elastic-chaos: interrupted; everything started was stopped", file=sys.stderr)
        return signals.FORCED_EXIT
    except Exception:  # a bug of the toolkit: its traceback, and not the exit code of a verdict
        traceback.print_exc()
        print("elastic-chaos: internal error (the traceback above is the toolkit's bug, not your job's); exit 4",
              file=sys.stderr)
        _say_leftovers(signals.leftovers())
        return EXIT_TOOLKIT


def _exit_code_of(command: str, exc: ChaosError) -> int:
    """2 for a usage or setup error. A run that a ChaosError ended exits as its report.json's outcome
    says (elastic_chaos.runner.endings.check_of): 2 for a bad input met once it had begun, 4 when the toolkit or
    its platform failed (a fault it could not inject, a watcher that died)."""
    if command not in ("run", "demo"):
        return EXIT_USAGE
    from elastic_chaos.analysis.verdict import Verdict
    from elastic_chaos.runner.endings import check_of
    return Verdict.failed(str(exc), check=check_of(exc)).outcome.exit_code


def _say_leftovers(left: list[str]) -> None:
    if left:
        print(f"elastic-chaos: NOT stopped: {'; '.join(left)}. The run's watchdog stops them when this command "
              "exits; if they remain, `elastic-chaos reap` does", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
