"""Reach the job's etcd from outside the cluster: ``kubectl port-forward``, stopped by PID.

The rendezvous watcher long-polls etcd's v2 API from the machine running the
scenario. Inside a pod the Service name works; on kind the etcd NodePort is
mapped to the host; anywhere else this forwards a free 127.0.0.1 port to the
Service. kubectl does the SPDY/WebSocket streaming that the Python client
would need a second code path for.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from elastic_chaos.errors import PlatformError
from elastic_chaos.waiting import eventually

_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) ->")


class PortForward:
    """``kubectl port-forward <target> :<port>`` on 127.0.0.1; ``start()`` blocks until it listens."""

    def __init__(self, kubectl: str, namespace: str, target: str, port: int, *, kubeconfig: str | None = None,
                 context: str | None = None, log_path: Path | None = None, ready_timeout_s: float = 30.0) -> None:
        self.kubectl, self.namespace, self.target, self.port = kubectl, namespace, target, port
        self.kubeconfig, self.context = kubeconfig, context
        self.log_path = log_path
        self.ready_timeout_s = ready_timeout_s
        self.local_port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._own_log = False
        """The log is a temp file this object made (no ``log_path`` given): stop() removes it."""

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.local_port}"

    def command(self) -> list[str]:
        cmd = [self.kubectl]
        if self.kubeconfig:
            cmd += ["--kubeconfig", self.kubeconfig]
        if self.context:
            cmd += ["--context", self.context]
        return cmd + ["-n", self.namespace, "port-forward", "--address", "127.0.0.1", self.target, f":{self.port}"]

    def start(self) -> None:
        """Start kubectl; block until it announces its local port. Its output goes to
        ``log_path`` (never a pipe nobody reads: kubectl logs every connection)."""
        if shutil.which(self.kubectl) is None:
            raise PlatformError(f"cannot reach the job's etcd from here: {self.kubectl} is not on PATH for "
                                "`kubectl port-forward`. Install kubectl, or pass etcd_endpoint (a NodePort or "
                                "load-balancer address of the etcd Service)")
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="elastic-chaos-port-forward-", suffix=".log")
            os.close(fd)
            self.log_path, self._own_log = Path(name), True
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
        log_path, proc = self.log_path, self._proc
        text = ""

        def announced() -> str:
            """"listening" (the port is known), "exited" (it never will be), or "" (not yet)."""
            nonlocal text
            text = log_path.read_text(errors="replace")
            match = _FORWARDING.search(text)
            if match:
                self.local_port = int(match[1])
                return "listening"
            return "exited" if proc.poll() is not None else ""

        if eventually(announced, timeout_s=self.ready_timeout_s, interval_s=0.1) == "listening":
            return
        self.stop()
        said = " | ".join(line.strip() for line in text.splitlines()[-5:] if line.strip())
        raise PlatformError(f"kubectl port-forward to {self.namespace}/{self.target} did not start: "
                            + (said or "no output"))

    def stop(self) -> None:
        """Stop kubectl by PID, and remove the temp log this object made (a given ``log_path`` is the
        caller's, kept). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._own_log and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
            self.log_path, self._own_log = None, False
