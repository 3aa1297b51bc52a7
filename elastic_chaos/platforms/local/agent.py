"""The command a local node runs: a torchrun agent and, under it, the reference trainer or a user's script."""
from __future__ import annotations

from pathlib import Path

from elastic_chaos.platforms.worker_logs import TEE_FLAGS
from elastic_chaos.spec import JobSpec, RdzvBackend


def agent_command(job: JobSpec, *, python: str, endpoint: str, address: str, store_host: bool,
                  script: tuple[str, ...], checkpoint_dir: Path, log_dir: Path) -> list[str]:
    """``torchrun`` (``python -m torch.distributed.run``) for one node of ``job``: its rendezvous at
    ``endpoint``, the workers' master address ``address`` (where the reference trainer binds its
    store), whether it hosts a c10d store, what it runs (``script``, located, or the trainer), and
    where the agent keeps its own files (``log_dir``: the workers' error files and their own stdout
    and stderr, which the agent copies into its output prefixed: elastic_chaos.platforms.worker_logs; torch's
    default is a fresh ``torchelastic_*`` folder in the system temp directory per agent, never removed)."""
    cmd = [python, *job.launcher,
           "--nnodes", job.nodes, "--nproc-per-node", str(job.nproc_per_node),
           "--rdzv-backend", job.rdzv.backend.value,
           "--rdzv-endpoint", endpoint, "--rdzv-id", job.run_id,
           "--max-restarts", str(job.max_restarts), "--log-dir", str(log_dir), *TEE_FLAGS]
    # torchrun's --local-addr is the workers' MASTER_ADDR: the trainer binds its store there
    cmd += ["--local-addr", address]
    conf = job.rdzv.conf()
    if job.rdzv.backend is RdzvBackend.C10D:
        # Say who hosts the store, as a PyTorchJob does for worker-0: torch's own
        # guess compares the endpoint with the host name's addresses, which in a
        # node's network namespace are not the node's address.
        conf["is_host"] = "1" if store_host else "0"
    if conf:
        cmd += ["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())]
    if job.monitor_interval is not None:
        cmd += ["--monitor-interval", str(job.monitor_interval)]
    if job.script:
        # elastic_chaos.trainer.launch forces the script's process-group backend (one that hard-codes NCCL, on CPU)
        shim = ["-m", "elastic_chaos.trainer.launch", "--backend", job.backend.value] if job.backend else []
        return cmd + shim + list(script or job.script)
    return cmd + ["-m", "elastic_chaos.trainer.train", "--checkpoint-dir", str(checkpoint_dir),
                  *job.trainer_command_args()]
