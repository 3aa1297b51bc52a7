"""What a local node's agent starts with in its environment, and why each variable.

The runner's own environment, then: the node's GPUs (CUDA_VISIBLE_DEVICES, NCCL_HOSTID), what the
job asks of its nodes (``JobSpec.node_env``), OMP_NUM_THREADS so that every node's threads fit this
machine's cores (a user's own is kept), the tag the process registry finds the node's processes by,
unbuffered output at INFO (the agent's lines are the run's evidence), the node's name, the shared
checkpoint folder, the node's instance-metadata stand-in, the network interface torch should use,
and, for a user's script, the 0.1 ``trainer`` name (elastic_chaos._compat) when nothing else
installed provides it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from elastic_chaos._compat import pythonpath_with_shims
from elastic_chaos.host import procs
from elastic_chaos.platforms.local.threads import plan_threads, usable_cores
from elastic_chaos.spec import JobSpec


def node_environment(job: JobSpec, name: str, tag: str, *, gpus: Mapping[str, str], checkpoint_dir: Path,
                     metadata_endpoint: str, interface: Mapping[str, str], script: bool) -> dict[str, str]:
    """The environment of node ``name``'s agent (``tag``: its processes' registry tag)."""
    env = dict(os.environ)
    env.update(gpus)
    env.update(job.node_env())
    env.update(plan_threads(usable_cores(), job.max_nodes, job.nproc_per_node, env).env)
    env.update({procs.TAG_VAR: tag, "LOGLEVEL": env.get("LOGLEVEL", "INFO"),
                "PYTHONUNBUFFERED": "1", "ELASTIC_CHAOS_NODE_NAME": name,
                "CHECKPOINT_DIR": str(checkpoint_dir),
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata_endpoint})
    env.update(interface)
    if script:   # a script written for 0.1 imports `trainer`
        pythonpath = pythonpath_with_shims(env.get("PYTHONPATH"))
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
    return env
