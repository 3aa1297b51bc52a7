"""Test helper: where processes listen for TCP connections, read from /proc (no ss needed).

Each process' own network namespace is read (/proc/PID/net/tcp, tcp6), so a
node in a namespace is judged by what listens there.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path

WILDCARDS = frozenset({"0.0.0.0", "::"})


def _address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    # the kernel prints each 32-bit word in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def listeners(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket ``pid`` holds in LISTEN state."""
    inodes = _socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                addr, port = cols[1].split(":")
                found.append((_address(addr), int(port, 16)))
    return found


def on_every_interface(pids: dict[int, str]) -> dict[str, list[tuple[str, int]]]:
    """The wildcard listeners of ``pids`` (PID -> what), by process."""
    out = {}
    for pid, what in pids.items():
        wild = [a for a in listeners(pid) if a[0] in WILDCARDS]
        if wild:
            out[f"{what} (PID {pid})"] = wild
    return out
