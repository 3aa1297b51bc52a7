#!/usr/bin/env bash
# Build the Kubernetes v1.20.2 binaries of the local cluster once, into a cache.
#
# Why this way: the only Kubernetes source reachable from these machines is
# Debian's `kubernetes` source package (v1.20.2) and the only Go is Debian's
# golang-1.19-go. Its vendored github.com/modern-go/reflect2 v1.0.1 crashes
# under Go >= 1.18 (first custom-resource create), so the vendor copy is
# replaced with Debian's reflect2 1.0.2 before building. One `make WHAT=...`
# builds all four server binaries (the code generators run once).
#
# Produces, in OUT (default .cluster/build):
#   bin/kube-apiserver bin/kube-controller-manager bin/kube-scheduler bin/kubelet
#   bin/kubectl         (unpacked from Debian's kubernetes-client .deb: installing
#                        it can clash with another package's /usr/bin/kubectl)
#   src/pause.c         (kubernetes' pause container source, for build-images.sh)
#   build.log, BUILD_SECONDS
# The source tree and Go caches (~3.4 GB) are deleted after a good build.
#
# Idempotent: does nothing when every binary is there and runs (FORCE=1 rebuilds).
# Needs root once for apt (a deb-src entry and the packages), exit 2 otherwise.
# Usage: kind/cluster/build-binaries.sh [OUT_DIR]     (~9 min on 2 cores, niced)
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$REPO/.cluster/build}"
BIN="$OUT/bin"
SERVERS="kube-apiserver kube-controller-manager kube-scheduler kubelet"
SRC_LIST=/etc/apt/sources.list.d/elastic-chaos-deb-src.sources
GO_ROOT=/usr/lib/go-1.19
REFLECT2=/usr/share/gocode/src/github.com/modern-go/reflect2
BUILD_PKGS="golang-1.19-go rsync dpkg-dev golang-github-modern-go-reflect2-dev"

say() { echo "cluster-build: $*"; }

all_built() {
    local b
    for b in $SERVERS; do
        [ -x "$BIN/$b" ] && "$BIN/$b" --version >/dev/null 2>&1 || return 1
    done
    [ -x "$BIN/kubectl" ] && "$BIN/kubectl" version --client >/dev/null 2>&1 && [ -f "$OUT/src/pause.c" ]
}

if [ "${FORCE:-0}" != 1 ] && all_built; then
    say "$("$BIN/kubelet" --version) and the other binaries already built in $BIN"
    exit 0
fi

have_deb_src() {
    [ -f "$SRC_LIST" ] || grep -rqs '^Types: *deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/
}

need_apt=0
[ -x "$GO_ROOT/bin/go" ] || need_apt=1
command -v rsync >/dev/null || need_apt=1
command -v dpkg-source >/dev/null || need_apt=1
[ -d "$REFLECT2" ] || need_apt=1
have_deb_src || need_apt=1
if [ "$need_apt" = 1 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "cluster-build: needs root once to add a deb-src entry ($SRC_LIST) and run:" >&2
        echo "  apt-get install --no-install-recommends $BUILD_PKGS" >&2
        echo "rerun as root (or with sudo)." >&2
        exit 2
    fi
    if ! have_deb_src; then
        cat > "$SRC_LIST" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    say "apt-get install $BUILD_PKGS"
    apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $BUILD_PKGS >/dev/null
fi

mkdir -p "$BIN" "$OUT/src" "$OUT/debs"

if ! { [ -x "$BIN/kubectl" ] && "$BIN/kubectl" version --client >/dev/null 2>&1; }; then
    say "kubectl from Debian's kubernetes-client .deb (unpacked, not installed)"
    rm -rf "$OUT/debs"/*
    (cd "$OUT/debs" && apt-get -o APT::Sandbox::User=root download -qq kubernetes-client >/dev/null \
        && dpkg-deb -x ./kubernetes-client_*.deb x)
    install -m 0755 "$OUT/debs/x/usr/bin/kubectl" "$BIN/kubectl"
    rm -rf "$OUT/debs"
fi

WORK="$OUT/src/tree"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
say "fetching Debian's kubernetes source"
apt-get -o APT::Sandbox::User=root source -qq --download-only kubernetes >/dev/null
dpkg-source --no-check -x ./*.dsc kubernetes >/dev/null
cd kubernetes
install -m 0644 build/pause/linux/pause.c "$OUT/src/pause.c"

say "replacing vendored reflect2 with Debian's 1.0.2"
rm -rf vendor/github.com/modern-go/reflect2
mkdir -p vendor/github.com/modern-go/reflect2
cp -r "$REFLECT2"/. vendor/github.com/modern-go/reflect2/
find vendor/github.com/modern-go/reflect2 -name '*_test.go' -delete

what=""
for b in $SERVERS; do what="$what cmd/$b"; done
say "building$what (about 9 minutes on 2 cores; log in $OUT/build.log)"
export PATH="$GO_ROOT/bin:$PATH"
export GOCACHE="$OUT/src/gocache" GOPATH="$OUT/src/gopath"
# (no GOFLAGS: hack/lib/golang.sh folds GOFLAGS into -tags; go.mod >= 1.14 + vendor/ already means -mod=vendor)
# The tarball has no git metadata: give the version script what it needs.
export KUBE_GIT_VERSION="v1.20.2" KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=debian
start=$(date +%s)
nice -n 10 make WHAT="${what# }" >"$OUT/build.log" 2>&1 || {
    tail -40 "$OUT/build.log" >&2
    echo "cluster-build: build failed; full log in $OUT/build.log" >&2
    exit 1
}
echo "$(( $(date +%s) - start ))" > "$OUT/BUILD_SECONDS"
for b in $SERVERS; do
    install -m 0755 "_output/local/bin/linux/amd64/$b" "$BIN/$b"
done
cd "$REPO"
chmod -R u+w "$OUT/src/gopath" 2>/dev/null || true   # Go's module cache is read-only
rm -rf "$WORK" "$OUT/src/gopath" "$OUT/src/gocache"
say "built $("$BIN/kubelet" --version) and the other binaries in $(cat "$OUT/BUILD_SECONDS") s into $BIN"
