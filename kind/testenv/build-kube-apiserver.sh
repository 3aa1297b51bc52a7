#!/usr/bin/env bash
# The real kube-apiserver of the `k8s_api` tests (no Docker, no kind here).
#
# It is the local cluster's kube-apiserver: kind/cluster/build-binaries.sh
# builds it once (with kube-controller-manager, kube-scheduler and kubelet, in
# one `make`, ~9 min on 2 cores) into .cluster/build/bin/, and this script
# hard-links it to OUT_DIR/bin/kube-apiserver, where tests/k8s look for it. So
# CI builds Kubernetes once for both the k8s_api tests and `make cluster-up`.
# (Why Debian's source, Go 1.19 and the reflect2 swap: see build-binaries.sh.)
#
# Idempotent: does nothing when the binary is already there and runs.
# Usage: kind/testenv/build-kube-apiserver.sh [OUT_DIR]   (default .k8s-testenv)
# Needs root once for apt (exit 2 with the apt-get line otherwise).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$REPO/.k8s-testenv}"
BIN="$OUT/bin/kube-apiserver"
SHARED="${CLUSTER_BUILD_DIR:-$REPO/.cluster/build}/bin/kube-apiserver"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "k8s-testenv: $("$BIN" --version) already at $BIN"
    exit 0
fi
"$REPO/kind/cluster/build-binaries.sh" "$(dirname "$(dirname "$SHARED")")"
mkdir -p "$OUT/bin"
rm -f "$BIN"
ln "$SHARED" "$BIN" 2>/dev/null || cp "$SHARED" "$BIN"
echo "k8s-testenv: $("$BIN" --version) at $BIN (shared with the local cluster's build)"
