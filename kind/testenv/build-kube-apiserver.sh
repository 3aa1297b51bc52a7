#!/usr/bin/env bash
# Build a real kube-apiserver for the `k8s_api` tests (no Docker, no kind here).
#
# Why this way: the only Kubernetes source reachable from these machines is
# Debian's `kubernetes` source package (v1.20.2), and the only Go is Debian's
# golang-1.19-go. Its vendored github.com/modern-go/reflect2 v1.0.1 crashes
# under Go >= 1.18 on the first custom-resource create, so the vendor copy is
# replaced with Debian's reflect2 1.0.2 before building.
#
# Idempotent: does nothing when the cached binary already runs.
# Usage: kind/testenv/build-kube-apiserver.sh [OUT_DIR]   (default .k8s-testenv)
# Needs root for apt (a deb-src entry and three packages); ~5 min on 2 cores.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$REPO/.k8s-testenv}"
BIN="$OUT/bin/kube-apiserver"
SRC_LIST=/etc/apt/sources.list.d/elastic-chaos-deb-src.sources
GO_ROOT=/usr/lib/go-1.19
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "k8s-testenv: $("$BIN" --version) already built at $BIN"
    exit 0
fi

need_apt=0
[ -x "$GO_ROOT/bin/go" ] || need_apt=1
command -v rsync >/dev/null || need_apt=1
[ -d "$REFLECT2" ] || need_apt=1
command -v dpkg-source >/dev/null || need_apt=1
if [ ! -f "$SRC_LIST" ] && ! grep -rqs '^Types: *deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    need_apt=1
fi
if [ "$need_apt" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "k8s-testenv: needs root once to add a deb-src entry and install golang-1.19-go," \
             "rsync, dpkg-dev, golang-github-modern-go-reflect2-dev; rerun as root (or sudo)." >&2
        exit 2
    fi
    if [ ! -f "$SRC_LIST" ]; then
        cat > "$SRC_LIST" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        golang-1.19-go rsync dpkg-dev golang-github-modern-go-reflect2-dev >/dev/null
fi

WORK="$OUT/src"
rm -rf "$WORK"
mkdir -p "$WORK" "$OUT/bin"
cd "$WORK"
echo "k8s-testenv: fetching Debian's kubernetes source"
apt-get source -qq --download-only kubernetes >/dev/null
dpkg-source --no-check -x ./*.dsc kubernetes >/dev/null
cd kubernetes

echo "k8s-testenv: replacing vendored reflect2 with Debian's 1.0.2"
rm -rf vendor/github.com/modern-go/reflect2
mkdir -p vendor/github.com/modern-go/reflect2
cp -r "$REFLECT2"/. vendor/github.com/modern-go/reflect2/
find vendor/github.com/modern-go/reflect2 -name '*_test.go' -delete

echo "k8s-testenv: building cmd/kube-apiserver (about 5 minutes on 2 cores)"
export PATH="$GO_ROOT/bin:$PATH"
export GOCACHE="$OUT/gocache"
export GOPATH="$OUT/gopath"
# (no GOFLAGS: hack/lib/golang.sh folds GOFLAGS into -tags; go.mod >= 1.14 + vendor/ already means -mod=vendor)
# The tarball has no git metadata: give the version script what it needs.
export KUBE_GIT_VERSION="v1.20.2" KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian
make WHAT=cmd/kube-apiserver >"$OUT/build.log" 2>&1 || {
    tail -40 "$OUT/build.log" >&2
    echo "k8s-testenv: build failed; full log in $OUT/build.log" >&2
    exit 1
}
built="$(find _output -type f -name kube-apiserver -perm -u+x | head -1)"
install -m 0755 "$built" "$BIN"
cd "$REPO"
rm -rf "$WORK" "$OUT/gopath" "$OUT/gocache"
echo "k8s-testenv: built $("$BIN" --version) at $BIN"
