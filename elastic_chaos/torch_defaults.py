"""torch's own defaults, declared once (torch 2.13): what a job gets for every knob it leaves unset.

The rendezvous handler's timeouts (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py),
the launcher's monitor interval (torch/distributed/run.py), init_process_group's collective
timeout per backend, ProcessGroupNCCL's environment defaults, and the elastic agent's fixed wait
between a worker's SIGTERM and its SIGKILL. Every sentence that says "torch's default" reads it
here: the timeouts report, the tuning advice, the scale answer and the options' help.
Imports nothing of the toolkit: everything may import it.
"""
from __future__ import annotations

from types import MappingProxyType

RDZV = MappingProxyType({"join_timeout": 600, "last_call_timeout": 30, "close_timeout": 30,
                         "keep_alive_interval": 5, "keep_alive_max_attempt": 3})
"""The dynamic rendezvous' timeouts (seconds) and heartbeat attempts, by RendezvousSpec field name."""

MONITOR_INTERVAL_S = 0.1
"""How often torchrun's agent checks its workers (``--monitor-interval``)."""

PG_TIMEOUT_S = MappingProxyType({"gloo": 1800.0, "nccl": 600.0})
"""init_process_group's collective timeout when a script sets none, by backend name."""

NCCL_DUMP_WAIT_MS = 60_000
"""TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: how long a failed collective's watchdog waits for a debug dump."""

NCCL_HEARTBEAT_S = 480
"""TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: how long a hung NCCL watchdog is tolerated."""

TORCHRUN_ASYNC_ERROR_HANDLING = 1
"""What torchrun gives its workers when TORCH_NCCL_ASYNC_ERROR_HANDLING is unset."""

AGENT_SHUTDOWN_WAIT_S = 30.0
"""The elastic agent's wait between a worker's SIGTERM and its SIGKILL when it stops its workers
(a restart, or its own SIGTERM forwarded: fixed, pytorch/pytorch#119856; ``--shutdown-timeout``
sets only the agent's own exit)."""

RDZV_READ_TIMEOUT_S = 60
"""``read_timeout`` of the rendezvous' store (the c10d TCPStore's and the etcd-v2 client's, rdzv-conf key
``read_timeout``): how long one store call may block before it fails (c10d_rendezvous_backend.py,
etcd_rendezvous_backend.py)."""
