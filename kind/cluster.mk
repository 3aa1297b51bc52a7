# The local multi-node cluster (no Docker, no registry), included from the top-level Makefile.
#
#   make cluster-up      build once (cached in .cluster/build/), then start a cluster of
#                        CLUSTER_NODES (4: one on-demand, three spot) nodes; kubeconfig in .cluster/kubeconfig
#   make cluster-down    stop it and remove everything it made (the build cache stays)
#   make cluster-status  processes, links, Node readiness
#   make cluster-test    the scenario catalog on it (pytest scenarios/ --platform kubernetes); brings the
#                        cluster up first when none runs, and down after (CLUSTER_KEEP=1 keeps it)
#
# Root needed (namespaces, cgroups, a bridge, iptables, apt). See docs/LOCAL-CLUSTER.md.

CLUSTER_NODES ?= 4
CLUSTER_PYTHON ?= python3
# where the cluster and its build cache live: $ELASTIC_CHAOS_CLUSTER_DIR, else .cluster here
# (outside /tmp, /run, /var/lib and /var/log: every node mounts its own private ones)
CLUSTER_DIR := $(or $(ELASTIC_CHAOS_CLUSTER_DIR),$(CURDIR)/.cluster)
# stdlib only: runs under the system python3 as root, without the venv (PYTHONPATH finds the package)
CLUSTER := ELASTIC_CHAOS_CLUSTER_DIR=$(CLUSTER_DIR) PYTHONPATH=$(CURDIR) $(CLUSTER_PYTHON) \
	-m elastic_chaos.localcluster

.PHONY: cluster-up cluster-down cluster-status cluster-test cluster-deps cluster-build cluster-images

cluster-up: cluster-deps cluster-build cluster-images
	$(CLUSTER) up --nodes $(CLUSTER_NODES)

cluster-down:
	$(CLUSTER) down

cluster-status:
	$(CLUSTER) status

# --durations 0: every scenario's time, for the CI budget
CLUSTER_TEST_ARGS ?= --durations=0
cluster-test: install
	@started=0; \
	if ! $(CLUSTER) status >/dev/null 2>&1; then $(MAKE) cluster-up || exit $$?; started=1; fi; \
	$(BIN)/python -m pytest scenarios/ --platform kubernetes --kubeconfig $(CLUSTER_DIR)/kubeconfig \
		--chaos-reports reports/cluster $(CLUSTER_TEST_ARGS) $(PYTEST_ARGS); code=$$?; \
	if [ $$started = 1 ] && [ -z "$(CLUSTER_KEEP)" ]; then $(CLUSTER) down; fi; \
	exit $$code

# the Debian packages the cluster and the image build use (apt-get only for what is missing)
cluster-deps:
	$(CLUSTER) deps --install

# kube-apiserver, -controller-manager, -scheduler, kubelet v1.20.2 + kubectl (once, ~10 min on 2 cores)
cluster-build:
	kind/cluster/build-binaries.sh $(CLUSTER_DIR)/build

# pause + trainer images as docker-archive tars; rebuilt only when their inputs change.
# The image's torch comes from the same TORCH_SPEC/PIP_TORCH_ARGS as `make install`'s.
cluster-images: cluster-build
	TORCH_SPEC="$(TORCH_SPEC)" PIP_TORCH_ARGS="$(PIP_TORCH_ARGS)" PYTHON="$(CLUSTER_PYTHON)" \
		PAUSE_C=$(CLUSTER_DIR)/build/src/pause.c kind/cluster/build-images.sh $(CLUSTER_DIR)/build/images
