#!/usr/bin/env bash
# Build the local cluster's images without Docker and without a registry.
#
#   pause    static gcc build of kubernetes' pause.c (the sandbox image)
#   trainer  a real Debian root filesystem (debootstrap --variant=minbase bookworm
#            + python3), torch (the CPU wheel) + python-etcd installed into it with
#            pip --target, this repo's elastic_chaos/trainer/ package, and Debian's etcd binary
#            (so a per-job etcd pod can run from the same image)
#
# Each image is an OCI layout built with umoci, then copied by skopeo to a
# docker-archive tar that `ctr -n k8s.io images import` loads into a node.
# Layers of the trainer image: 1. Debian + python3, 2. torch + deps + etcd,
# 3. elastic_chaos/trainer/. Each is cached under a hash of its inputs, so a change in
# elastic_chaos/trainer/ rebuilds only the small top layer; nothing is rebuilt when no
# input changed. The docker-archive of the trainer image is tagged with the
# hash of all inputs; its reference is written to OUT/trainer.ref.
#
# Needs root (debootstrap), umoci, skopeo, debootstrap, gcc, and a Python 3.11 with pip
# (PYTHON, default python3: its wheels must fit the image's Debian python3.11).
# torch: TORCH_SPEC (default torch==2.13.0, the Makefile's pin; this machine's
# pip config finds the local CPU wheel) with PIP_TORCH_ARGS (e.g. --index-url
# https://download.pytorch.org/whl/cpu elsewhere), as `make install` does.
# OUT defaults to .cluster/build/images.
# Usage: kind/cluster/build-images.sh [OUT_DIR]
set -euo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${1:-$REPO/.cluster/build/images}"
PAUSE_C="${PAUSE_C:-$REPO/.cluster/build/src/pause.c}"
PYTHON="${PYTHON:-python3}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
PIP_TORCH_ARGS="${PIP_TORCH_ARGS:-}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PY_TARGET=usr/local/lib/python3.11/dist-packages   # on Debian python3's sys.path
ETCD_BIN="${ETCD_BIN:-/usr/bin/etcd}"
PYTHON_ETCD_SPEC="${PYTHON_ETCD_SPEC:-python-etcd==0.4.5}"
# torch.distributed.checkpoint (the trainer's --checkpoint-format dcp) gathers its save plan through
# numpy; without it every DCP save fails ("Numpy is not available")
NUMPY_SPEC="${NUMPY_SPEC:-numpy==2.4.6}"
IMAGE_PREFIX=localhost/elastic-chaos
SELF="$REPO/kind/cluster/build-images.sh"

say() { echo "cluster-images: $*"; }
die() { echo "cluster-images: $*" >&2; exit 2; }
hash_of() { sha256sum | cut -c1-16; }

[ "$(id -u)" = 0 ] || die "needs root (debootstrap, file ownership in the image); rerun as root"
missing=""
for t in umoci skopeo debootstrap gcc; do command -v "$t" >/dev/null || missing="$missing $t"; done
[ -x "$ETCD_BIN" ] || missing="$missing etcd-server"
[ -z "$missing" ] || die "missing:$missing; run: apt-get install --no-install-recommends umoci skopeo debootstrap gcc libc6-dev etcd-server"
[ -f "$PAUSE_C" ] || die "no $PAUSE_C: run kind/cluster/build-binaries.sh first (it keeps pause.c from the kubernetes source)"
"$PYTHON" -m pip --version >/dev/null 2>&1 || die "no pip for $PYTHON: pass PYTHON=/path/to/python3.11"
[ "$("$PYTHON" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" = True ] \
    || die "$PYTHON is not Python 3.11 (the image's Debian bookworm python3): pass PYTHON=/path/to/python3.11"

mkdir -p "$OUT"
cd "$OUT"
T0=$(date +%s)

# ---- pause ---------------------------------------------------------------
pause_key="$( { cat "$PAUSE_C"; gcc --version | head -1; sed -n '/^# ---- pause/,/^# ---- trainer/p' "$SELF"; } | hash_of)"
if [ "$(cat pause.key 2>/dev/null)" != "$pause_key" ] || [ ! -f pause.tar ]; then
    say "pause image"
    rm -rf pause-oci pause-bundle pause.tar
    gcc -Os -Wall -Werror -static -DVERSION=v3.4.1-elastic-chaos -o pause "$PAUSE_C"
    strip pause
    umoci init --layout pause-oci
    umoci new --image pause-oci:3.4.1
    umoci unpack --image pause-oci:3.4.1 pause-bundle >/dev/null
    install -m 0755 pause pause-bundle/rootfs/pause
    umoci repack --image pause-oci:3.4.1 pause-bundle >/dev/null
    umoci config --image pause-oci:3.4.1 --config.entrypoint /pause --config.user 65535:65535 \
        --architecture amd64 --os linux
    umoci gc --layout pause-oci
    skopeo copy -q oci:pause-oci:3.4.1 "docker-archive:pause.tar:$IMAGE_PREFIX/pause:3.4.1"
    rm -rf pause-oci pause-bundle pause
    echo "$pause_key" > pause.key
fi
echo "$IMAGE_PREFIX/pause:3.4.1" > pause.ref

# ---- trainer -------------------------------------------------------------
# layer 1: Debian minbase + python3 (debootstrap, ~75 s)
base_key="$( { echo "$SUITE $MIRROR"; sed -n '/^# layer 1/,/^# layer 2/p' "$SELF"; } | hash_of)"
if [ "$(cat base.key 2>/dev/null)" != "$base_key" ] || [ ! -f base.layer.tar ]; then
    say "layer 1: debootstrap --variant=minbase --include=python3 $SUITE (about 75 s)"
    rm -rf rootfs base.layer.tar
    nice -n 10 debootstrap --variant=minbase --include=python3 "$SUITE" rootfs "$MIRROR" >debootstrap.log 2>&1 \
        || { tail -20 debootstrap.log >&2; die "debootstrap failed (log: $OUT/debootstrap.log)"; }
    rm -rf rootfs/var/cache/apt/* rootfs/var/lib/apt/lists/* rootfs/usr/share/doc rootfs/usr/share/man \
        rootfs/usr/share/info rootfs/usr/share/locale rootfs/var/log/* rootfs/var/cache/debconf/*-old
    tar --numeric-owner --xattrs -C rootfs -cf base.layer.tar .
    rm -rf rootfs
    echo "$base_key" > base.key
fi

# layer 2: torch + python-etcd (+ their deps) via pip --target, and the etcd binary
deps_key="$( { echo "$base_key $TORCH_SPEC $PIP_TORCH_ARGS $PYTHON_ETCD_SPEC $NUMPY_SPEC"; sha256sum "$ETCD_BIN";
              sed -n '/^# layer 2/,/^# layer 3/p' "$SELF"; } | hash_of)"
if [ "$(cat deps.key 2>/dev/null)" != "$deps_key" ] || [ ! -f deps.layer.tar ]; then
    say "layer 2: $TORCH_SPEC $NUMPY_SPEC $PYTHON_ETCD_SPEC (pip --target) + $("$ETCD_BIN" --version | head -1)"
    rm -rf deps-root deps.layer.tar
    mkdir -p "deps-root/$PY_TARGET" deps-root/usr/local/bin
    # shellcheck disable=SC2086
    { nice -n 10 "$PYTHON" -m pip install --no-warn-script-location --target "deps-root/$PY_TARGET" \
          $PIP_TORCH_ARGS "$TORCH_SPEC" "$NUMPY_SPEC" \
      && nice -n 10 "$PYTHON" -m pip install --no-warn-script-location --target "deps-root/$PY_TARGET" \
          --upgrade "$PYTHON_ETCD_SPEC"; } >pip.log 2>&1 \
        || { tail -20 pip.log >&2; die "pip install into the image failed (log: $OUT/pip.log)"; }
    ls -d "deps-root/$PY_TARGET"/torch-*.dist-info >>pip.log
    # console scripts would carry this machine's interpreter path: replace the one that matters
    rm -rf "deps-root/$PY_TARGET/bin"
    printf '#!/bin/sh\nexec /usr/bin/python3 -m torch.distributed.run "$@"\n' > deps-root/usr/local/bin/torchrun
    chmod 0755 deps-root/usr/local/bin/torchrun
    install -m 0755 "$ETCD_BIN" deps-root/usr/local/bin/etcd
    tar --numeric-owner --owner=0 --group=0 -C deps-root -cf deps.layer.tar .
    rm -rf deps-root
    echo "$deps_key" > deps.key
fi

# layer 3: this repo's elastic_chaos/trainer/ package
# the package's root __init__ (it imports nothing at load) and its trainer: all a pod imports
trainer_files="$( (cd "$REPO" && echo elastic_chaos/__init__.py && find elastic_chaos/trainer -name '*.py' -type f) | LC_ALL=C sort)"
trainer_key="$( { echo "$deps_key"; (cd "$REPO" && echo "$trainer_files" | xargs sha256sum);
                 sed -n '/^# layer 3/,$p' "$SELF"; } | hash_of)"
ref="$IMAGE_PREFIX/trainer:$trainer_key"
if [ "$(cat trainer.key 2>/dev/null)" != "$trainer_key" ] || [ ! -f trainer.tar ]; then
    say "layer 3: elastic_chaos/trainer/ ($(echo "$trainer_files" | wc -l) files), pack + docker-archive"
    rm -rf trainer-root trainer.layer.tar trainer.tar
    mkdir -p "trainer-root/$PY_TARGET"
    (cd "$REPO" && echo "$trainer_files" | xargs cp --parents -t "$OUT/trainer-root/$PY_TARGET")
    "$PYTHON" -m compileall -q "trainer-root/$PY_TARGET/elastic_chaos" >/dev/null
    tar --numeric-owner --owner=0 --group=0 -C trainer-root -cf trainer.layer.tar .
    rm -rf trainer-root
    # the OCI layout keeps layers 1+2 (tag deps-KEY): an elastic_chaos/trainer/ change only adds layer 3
    if ! umoci stat --image "trainer-oci:deps-$deps_key" >/dev/null 2>&1; then
        say "packing layers 1+2 (gzip of about 1 GB)"
        rm -rf trainer-oci
        umoci init --layout trainer-oci
        umoci new --image trainer-oci:empty
        umoci raw add-layer --image trainer-oci:empty --tag base base.layer.tar
        nice -n 10 umoci raw add-layer --image trainer-oci:base --tag "deps-$deps_key" deps.layer.tar
        umoci rm --image trainer-oci:empty
        umoci rm --image trainer-oci:base
    fi
    for t in $(umoci ls --layout trainer-oci); do
        [ "$t" = "deps-$deps_key" ] || umoci rm --image "trainer-oci:$t"
    done
    umoci gc --layout trainer-oci
    umoci raw add-layer --image "trainer-oci:deps-$deps_key" --tag "$trainer_key" trainer.layer.tar
    umoci config --image "trainer-oci:$trainer_key" --architecture amd64 --os linux \
        --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --config.env PYTHONUNBUFFERED=1 --config.cmd python3 --config.workingdir /
    skopeo copy -q "oci:trainer-oci:$trainer_key" "docker-archive:trainer.tar:$ref"
    rm -f trainer.layer.tar
    echo "$trainer_key" > trainer.key
fi
echo "$ref" > trainer.ref
say "images ready in $(( $(date +%s) - T0 )) s: $(cat pause.ref) ($(du -h pause.tar | cut -f1)), $ref ($(du -h trainer.tar | cut -f1))"
