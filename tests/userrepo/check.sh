#!/usr/bin/env bash
# `make user-test`: elastic-chaos as a new user gets it, outside this clone.
#
# Builds the wheel from a copy of the clone's files, installs it into a fresh virtualenv under a
# temporary folder (first alone: no torch and no nvidia-* package may come with it, and `doctor`
# must say how to install a CPU torch; then the CPU torch, TORCH_SPEC), copies the user repository
# template (tests/userrepo/repo: the user's own DDP script train.py, scenarios/test_kill_node.py, a
# pyproject.toml with the chaos_reports setting) next to it, and runs `pytest userrepo/scenarios`
# from the folder above, as in a CI job. Checks: the scenario passes, report.json lies where the
# setting says and the summary line names it, no CUDA torch or nvidia-* package was installed
# (the torch it got is printed), nothing was written into the clone, nothing is left running.
# Everything it made (virtualenv, wheel, user repository, pip's temporary files) is removed at the
# end, also on failure or Ctrl-C. Bounded: each install and the pytest run have a time limit.
#
#   tests/userrepo/check.sh            (PYTHON, TORCH_SPEC, PIP_TORCH_ARGS as in the Makefile)
#   KEEP=1 tests/userrepo/check.sh     keep the temporary folder to look at
set -euo pipefail

CLONE=$(cd "$(dirname "$0")/../.." && pwd -P)
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PIP_TORCH_ARGS=${PIP_TORCH_ARGS:-}
INSTALL_LIMIT_S=${INSTALL_LIMIT_S:-600}
PYTEST_LIMIT_S=${PYTEST_LIMIT_S:-600}

unset PYTHONPATH VIRTUAL_ENV PYTHONHOME  # the venv must import the wheel, never this clone
T=$(mktemp -d "${TMPDIR:-/tmp}/elastic-chaos-user.XXXXXX")
export TMPDIR="$T/tmp" ELASTIC_CHAOS_STATE="$T/state"
mkdir -p "$TMPDIR"
touch "$T/started"
cd "$T"  # never in the clone: `python -c`/`-m` would import its elastic_chaos/ from the current directory

step() { echo "=== user-test: $* (at ${SECONDS} s)"; }
fail() { echo "=== user-test FAILED: $*" >&2; exit 1; }
# A bounded command runs in the background (timeout puts it in a process group of its own), so that
# an interrupt reaches this script, whose cleanup then stops it (timeout passes the TERM on).
CHILD=
bounded() {
  local limit=$1 rc=0; shift
  timeout --kill-after=60 "$limit" "$@" &
  CHILD=$!
  wait "$CHILD" || rc=$?
  CHILD=
  return "$rc"
}
cleanup() {
  local rc=$?
  if [ -n "$CHILD" ] && kill -TERM "$CHILD" 2>/dev/null; then wait "$CHILD" 2>/dev/null || true; fi
  if [ -x "$T/venv/bin/elastic-chaos" ]; then  # whatever a killed run left: stopped by its tag, never by name
    "$T/venv/bin/elastic-chaos" reap --state-dir "$ELASTIC_CHAOS_STATE" >/dev/null 2>&1 || true
  fi
  if [ -n "${KEEP:-}" ]; then echo "=== user-test: kept $T"; else step "remove $T"; rm -rf "$T"; fi
  echo "=== user-test: $([ $rc = 0 ] && echo passed || echo "failed (exit $rc)") in ${SECONDS} s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "copy the clone's files to $T/src (building in the clone would write build/ and *.egg-info there)"
git -C "$CLONE" rev-parse --git-dir >/dev/null 2>&1 || fail "$CLONE is not a git clone"
mkdir -p "$T/src"
git -C "$CLONE" ls-files -z --cached --others --exclude-standard \
  | (cd "$CLONE" && xargs -0 tar --create --file=- --no-recursion --ignore-failed-read) \
  | tar --extract --file=- --directory "$T/src"

step "fresh virtualenv $T/venv ($("$PYTHON" --version 2>&1))"
"$PYTHON" -m venv "$T/venv"
PY="$T/venv/bin/python"
# --no-compile: byte-compiling torch's files was most of its install here (3.5 min against 35 s
# under load); what is installed is the same, and Python compiles what it imports
PIP=("$PY" -m pip --disable-pip-version-check)
INSTALL=(install --quiet --no-compile)

step "build the wheel"
bounded "$INSTALL_LIMIT_S" "${PIP[@]}" wheel --quiet --no-deps --wheel-dir "$T/dist" "$T/src"
WHEEL=$(ls "$T"/dist/elastic_chaos-*.whl)
echo "$(basename "$WHEEL"): $(du -h "$WHEEL" | cut -f1)"

step "install the wheel alone: it must bring etcd and no torch"
bounded "$INSTALL_LIMIT_S" "${PIP[@]}" "${INSTALL[@]}" "$WHEEL"
if "${PIP[@]}" list --format=freeze | grep -iE '^(torch|nvidia-)'; then
  fail "installing elastic-chaos pulled torch or nvidia-* packages (above)"
fi
set +e; "$T/venv/bin/elastic-chaos" doctor > "$T/doctor.txt" 2>&1; rc=$?; set -e
cat "$T/doctor.txt"
[ $rc = 2 ] || fail "doctor without torch exited $rc, not 2"
grep -q "torch is not installed" "$T/doctor.txt" && grep -q "download.pytorch.org/whl/cpu" "$T/doctor.txt" \
  || fail "doctor without torch did not say how to install a CPU build"
grep -q "^ok    etcd: etcd 3.5" "$T/doctor.txt" || fail "the wheel's default install has no etcd 3.5"
set +e; "$T/venv/bin/elastic-chaos" run kill-node --quiet --report-dir "$T/no-torch" > "$T/run.txt" 2>&1; rc=$?; set -e
cat "$T/run.txt"
[ $rc = 2 ] && grep -q "torch is not installed" "$T/run.txt" || fail "a run without torch exited $rc, not 2 with the fix"

step "install torch as a CPU CI job would: $TORCH_SPEC ${PIP_TORCH_ARGS}"
# shellcheck disable=SC2086  # PIP_TORCH_ARGS is a list of pip options
bounded "$INSTALL_LIMIT_S" "${PIP[@]}" "${INSTALL[@]}" $PIP_TORCH_ARGS "$TORCH_SPEC"
"$PY" -c "import torch; print(f'torch {torch.__version__}, torch.version.cuda={torch.version.cuda}')"
"$PY" -c "import sys, torch; sys.exit(torch.version.cuda is not None)" || fail "a CUDA build of torch was installed"
if "${PIP[@]}" list --format=freeze | grep -iE '^nvidia-'; then fail "nvidia-* packages were installed (above)"; fi
"$T/venv/bin/elastic-chaos" doctor || fail "doctor with torch installed"

step "what the help names is in the wheel: the bundled trace, the reference trainer"
"$T/venv/bin/elastic-chaos" trace spot-3 --compress 30
"$PY" -c "import elastic_chaos, elastic_chaos.trainer.train; print('elastic_chaos from', elastic_chaos.__file__)" | tee "$T/where.txt"
grep -q "$T/venv/" "$T/where.txt" || fail "elastic_chaos was not imported from the virtualenv"

step "a user repository: $T/work/userrepo (its own train.py and scenarios/)"
mkdir -p "$T/work"
cp -r "$CLONE/tests/userrepo/repo" "$T/work/userrepo"

step "pytest userrepo/scenarios, from the folder above it (limit ${PYTEST_LIMIT_S} s)"
: > "$T/pytest.txt"   # there before tail opens it (the background job's redirection may come later)
cd "$T/work"
timeout --kill-after=60 "$PYTEST_LIMIT_S" "$PY" -m pytest userrepo/scenarios -v > "$T/pytest.txt" 2>&1 &
CHILD=$!
tail --pid="$CHILD" -n +1 -f "$T/pytest.txt" &   # its output as it comes; ends with pytest
TAIL=$!
rc=0
wait "$CHILD" || rc=$?
CHILD=
wait "$TAIL" || true
cd "$T"
[ "$rc" = 0 ] || fail "the user's scenario failed (pytest exit $rc)"

step "check where the report went, and what was written"
REPORTS="$T/work/userrepo/chaos-reports"
REPORT=$(ls -d "$REPORTS"/*/ 2>/dev/null | head -1)
[ -n "$REPORT" ] && [ -f "$REPORT/report.json" ] || fail "no report.json under $REPORTS (the chaos_reports setting)"
grep -q "^elastic-chaos: report: ${REPORT%/}/report.html" "$T/pytest.txt" \
  || fail "the terminal summary did not name ${REPORT%/}/report.html"
"$PY" -c "import json, sys; r = json.load(open(sys.argv[1])); sys.exit(not r['verdict']['passed'])" \
  "$REPORT/report.json" || fail "report.json's verdict is not passed"
[ ! -e "$T/work/reports" ] && [ ! -e "$T/work/userrepo/reports" ] || fail "a reports/ folder beside the setting's"
step "nothing written into the clone, nothing left running"
# (head closing the pipe after 20 names is not a failure of the check: || true under pipefail)
# .cluster and .k8s-testenv are the clone's build caches, which .ci/run's `make k8s-testenv` fills
# while this runs beside it; a user's run never writes there (its state and reports are under $T).
written=$(find "$CLONE" \( -path "$CLONE/.git" -o -path "$CLONE/.cluster" -o -path "$CLONE/.k8s-testenv" \) -prune \
  -o -newer "$T/started" -print | head -20 || true)
[ -z "$written" ] || fail "the run wrote into the clone: $written"
"$T/venv/bin/elastic-chaos" reap --state-dir "$ELASTIC_CHAOS_STATE" || fail "a run left something running"
echo "report: ${REPORT%/}/report.html; nothing written into $CLONE; nothing left running"
