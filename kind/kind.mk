# kind targets, included from the top-level Makefile.
#
#   make kind-up     create the cluster (kind/cluster.yaml), build + load the trainer image,
#                    install the CRD + controller when the job kind needs one
#                    (KIND_JOB_KIND=statefulset (default: none needed)|elasticjob|pytorchjob) and etcd
#   make kind-test   pytest scenarios/ --platform kind
#   make kind-down   delete the cluster
#
# Needs docker (or podman: KIND_DOCKER=podman), kind and kubectl on PATH.

KIND ?= kind
KUBECTL ?= kubectl
KIND_DOCKER ?= docker
KIND_CLUSTER ?= elastic-chaos
KIND_IMAGE ?= elastic-chaos-trainer:dev
KIND_JOB_KIND ?= statefulset
KIND_SHARED ?= /tmp/elastic-chaos-shared
KIND_TORCH_SPEC ?= torch
ETCD_IMAGE ?= quay.io/coreos/etcd:v3.5.17
TRAINING_OPERATOR_REF ?= v1.8.1
KCTL = $(KUBECTL) --context kind-$(KIND_CLUSTER)

.PHONY: kind-up kind-test kind-down kind-image kind-controller

kind-up: install
	@command -v $(KIND) >/dev/null || { echo "kind is not on PATH: https://kind.sigs.k8s.io/docs/user/quick-start/#installation"; exit 2; }
	@command -v $(KIND_DOCKER) >/dev/null || { echo "$(KIND_DOCKER) is not on PATH: kind runs its nodes in containers"; exit 2; }
	mkdir -p $(KIND_SHARED)
	$(KIND) get clusters 2>/dev/null | grep -qx $(KIND_CLUSTER) || \
		$(KIND) create cluster --name $(KIND_CLUSTER) --config kind/cluster.yaml --wait 180s
	$(MAKE) kind-image kind-controller
	$(KCTL) apply -f kind/manifests/etcd.yaml
	$(KCTL) -n elastic-job rollout status deploy/etcd --timeout=180s
	@echo "kind cluster $(KIND_CLUSTER) is up: make kind-test (job kind $(KIND_JOB_KIND))"

kind-image:
	DOCKER_BUILDKIT=1 $(KIND_DOCKER) build -f kind/Dockerfile --build-arg TORCH_SPEC="$(KIND_TORCH_SPEC)" \
		-t $(KIND_IMAGE) .
	$(KIND) load docker-image $(KIND_IMAGE) --name $(KIND_CLUSTER)
	$(KIND_DOCKER) pull $(ETCD_IMAGE)
	$(KIND) load docker-image $(ETCD_IMAGE) --name $(KIND_CLUSTER)

kind-controller:
ifeq ($(KIND_JOB_KIND),statefulset)
	@echo "job kind statefulset: kube-controller-manager runs it, no operator to install"
else ifeq ($(KIND_JOB_KIND),pytorchjob)
	$(KCTL) apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=$(TRAINING_OPERATOR_REF)"
	$(KCTL) -n kubeflow rollout status deploy/training-operator --timeout=300s
else
	$(KCTL) apply -f kind/manifests/crds/elasticjobs.elastic.pytorch.org.yaml
	$(KCTL) wait --for condition=established --timeout=60s crd/elasticjobs.elastic.pytorch.org
	$(KCTL) apply -f kind/manifests/controller/elasticjob-controller.yaml
	$(KCTL) -n elastic-job rollout status deploy/elastic-job-k8s-controller --timeout=300s
endif

kind-test: install
	$(BIN)/python -m pytest scenarios/ --platform kind --job-kind $(KIND_JOB_KIND) \
		--kube-context kind-$(KIND_CLUSTER) --trainer-image $(KIND_IMAGE) $(PYTEST_ARGS)

kind-down:
	$(KIND) delete cluster --name $(KIND_CLUSTER)
