"""A degraded link between local nodes: random loss, a bandwidth cap, a link that goes down.

This machine's kernel has no ``sch_netem``, so the effects netem gives in one qdisc are made
from other parts, each only on what the run made (its nodes' namespaces and their veths,
elastic_chaos.host.netns), and each removed by name:

- **loss** and **down**: an iptables chain ``EC-<id>`` in the filter table of both ends'
  namespaces, jumped to from INPUT on ``eth0``, that DROPs packets from the other end
  (``-m statistic --mode random --probability p``; without the match for a link that is
  down). Drops are on the receiving side only: a DROP in OUTPUT answers the local sender
  with EPERM at once (a ``connect`` fails), which no real lossy or dead link does.
- **delay** and **bursty loss**: the same chain sends the other end's packets to a netfilter
  queue (``-j NFQUEUE --queue-bypass``) read by a thread of the runner
  (elastic_chaos.host.nfqueue) that holds each packet's verdict for the delay, or drops the
  ones a Gilbert-Elliott chain says. Each receiving side has its own reader, so the two
  directions of a link may differ (``forward``: what the node sends its peers, received in
  theirs; ``reverse``: what they send it, received in its own).
- **rate**: an HTB qdisc with one class (``rate = ceil = cap``) on the node's ``eth0``
  (what it sends to the peers) and on its host-side veth (what the peers send it), a u32
  filter per peer address steering only that traffic into the class; anything else passes
  HTB unclassified, unshaped.

An end may have networks behind it (``End.routes``: a cluster machine's pod range, which it
routes): their traffic is the link's too. Each rule and filter then matches those ranges
beside the end's address, and the chain is also jumped to from FORWARD on ``eth0`` (a pod's
packet from the other machine is forwarded to the pod, never delivered to the machine). An
end's namespace is a name under /var/run/netns (the local platform's) or the path of a
namespace file (``/proc/PID/ns/net``: a local-cluster machine's, entered with nsenter).

:func:`probe` measures what was applied: UDP echoes for the loss and the round trip, a
TCP stream for the rate, from one end's namespace to the other's. Both ends are namespaces
of this one machine, read by threads of this one process on one monotonic clock, so the
echo's arrival time splits each round trip into its two one-way delays, and the datagrams
the echo saw split the loss by direction.

Nothing here outlives its namespaces: a reaped run's namespaces and veths go, and the
rules and qdiscs inside with them.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import random
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from elastic_chaos.errors import SetupError
from elastic_chaos.host.nfqueue import BurstLoss, DelayLine

CLONE_NEWNET = 0x40000000
T = TypeVar("T")


def unavailable_reason() -> str | None:
    """Why link faults cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "link faults need root (iptables and tc inside the nodes' network namespaces)"
    for tool, package in (("iptables", "iptables"), ("tc", "iproute2"), ("ip", "iproute2")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package}; `make network-testenv`)"
    return None


@dataclass(frozen=True)
class End:
    """One end of a link: a node's namespace, its address and its host-side veth."""

    node: str
    netns: str
    """A named namespace (``ip netns``), or the path of a namespace file (starts with ``/``)."""
    address: str
    host_veth: str
    routes: tuple[str, ...] = ()
    """Networks behind this end that it routes (CIDRs: a cluster machine's pods); their traffic
    crosses the link too."""

    @property
    def sources(self) -> tuple[str, ...]:
        """What this end's packets come from (and go to): its address, then the networks behind it."""
        return (f"{self.address}/32", *self.routes)


def netns_exists(netns: str) -> bool:
    """Whether the namespace is still there (a named one listed, a namespace file present)."""
    if netns.startswith("/"):
        return Path(netns).exists()
    return netns in _run(["ip", "netns", "list"], check=False).split()


@dataclass
class Degradation:
    """What one fault made between ``node`` and ``peers``, so that exactly that is removed."""

    ident: str
    node: End
    peers: tuple[End, ...]
    chains: list[str] = field(default_factory=list)
    """Namespaces holding our iptables chain ``EC-<ident>``."""
    qdiscs: list[tuple[str | None, str]] = field(default_factory=list)
    """(namespace or None for the host, device) holding our HTB root qdisc."""
    queue: int = 0
    """The netfilter queue number a delay uses (unique among the run's degradations)."""
    reverse_queue: int | None = None
    """A second queue number, for the store's link when its two directions are read apart (a
    delay per direction, a bursty loss: both directions are received in the node's one
    namespace, and one queue has one reader)."""
    store_port: int | None = None
    """Degrade the node's link to the rendezvous store instead (its relay's port on the
    namespace's loopback: both directions of that TCP port), not its links to ``peers``."""
    delays: list[DelayLine] = field(default_factory=list)
    """The delay lines holding (or dropping) this link's packets (one per receiving side)."""
    directions: list[tuple[str, str, str]] = field(default_factory=list)
    """Beside each delay line: its direction (``forward``: node -> peers; ``reverse``: peers ->
    node) and the packets' sender and receiver in words."""

    @property
    def chain(self) -> str:
        return f"EC-{self.ident}"

    @property
    def iface(self) -> str:
        """Where the link's packets are received: ``eth0``, or ``lo`` for the store's relay."""
        return "lo" if self.store_port is not None else "eth0"

    @property
    def queues(self) -> tuple[int, ...]:
        """The netfilter queue numbers this degradation may bind."""
        return (self.queue,) if self.reverse_queue is None else (self.queue, self.reverse_queue)

    def drops(self) -> list[dict[str, object]]:
        """What each bursty-loss reader decided so far: its direction, sender and receiver, and
        its tally (packets, dropped, bursts, loss, mean burst). Empty: no bursty loss here."""
        return [{"direction": way, "from": sender, "to": receiver, **line.loss.tally()}
                for line, (way, sender, receiver) in zip(self.delays, self.directions, strict=True)
                if line.loss is not None]

    @property
    def hooks(self) -> tuple[str, ...]:
        """The built-in chains that jump to ours: INPUT, and FORWARD where an end routes
        networks behind it (their packets are forwarded, not delivered)."""
        routed = any(e.routes for e in (self.node, *self.peers))
        return ("INPUT", "FORWARD") if routed and self.store_port is None else ("INPUT",)


def _in(netns: str | None, cmd: list[str]) -> list[str]:
    if not netns:
        return cmd
    if netns.startswith("/"):
        return ["nsenter", f"--net={netns}", "--", *cmd]
    return ["ip", "netns", "exec", netns, *cmd]


def _run(cmd: list[str], *, check: bool = True) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise SetupError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def _ipt(netns: str, *args: str, check: bool = True) -> str:
    return _run(_in(netns, ["iptables", "-w", "5", *args]), check=check)


def set_loss(d: Degradation, probability: float) -> None:
    """Drop packets between ``d.node`` and each peer with ``probability`` each way (1: none
    passes, a link that is down; 0: every one passes). Idempotent, may be called again to change it."""
    if not 0.0 <= probability <= 1.0:
        raise SetupError(f"a loss probability is between 0 and 1, not {probability!r}")
    if d.delays:
        raise SetupError("a delayed link takes no loss rule (one chain each)")
    for netns, sources in _pairs(d):
        _chain(d, netns)
        _ipt(netns, "-F", d.chain)
        if probability <= 0.0:
            continue
        match = [] if probability >= 1.0 else ["-m", "statistic", "--mode", "random",
                                                "--probability", f"{probability:.6f}"]
        for m in sources:
            _ipt(netns, "-A", d.chain, *m, *match, "-j", "DROP")


def _chain(d: Degradation, netns: str) -> None:
    if netns not in d.chains:
        _ipt(netns, "-N", d.chain)
        d.chains.append(netns)
        for hook in d.hooks:
            _ipt(netns, "-I", hook, "-i", d.iface, "-j", d.chain)


def set_delay(d: Degradation, delay_s: float, jitter_s: float = 0.0, *, reverse_delay_s: float | None = None,
              reverse_jitter_s: float | None = None) -> None:
    """Hold every packet between ``d.node`` and each peer ``delay_s`` (+- a uniform ``jitter_s``)
    each way before it is received: an NFQUEUE rule in the receiving namespace's chain and a
    delay line (elastic_chaos.host.nfqueue) reading that queue. With ``reverse_delay_s`` /
    ``reverse_jitter_s`` (None: the same as the other way), the packets the peers (or the store)
    send the node are held that long instead; a direction held 0 +- 0 gets no rule. Once per
    Degradation."""
    back = delay_s if reverse_delay_s is None else reverse_delay_s
    back_jitter = jitter_s if reverse_jitter_s is None else reverse_jitter_s
    _queue(d, {"forward": _Hold(delay_s, jitter_s), "reverse": _Hold(back, back_jitter)})


def set_bursty_loss(d: Degradation, rate: float, burst: float, *, seed: int | None = None) -> None:
    """Drop ``rate`` of the packets between ``d.node`` and each peer each way, in bursts of
    ``burst`` packets on average (nfqueue.BurstLoss: a Gilbert-Elliott chain per receiving side,
    stepped by every packet of the link it reads), through the netfilter queue as a delay is:
    iptables' ``statistic`` match draws each packet alone. Once per Degradation; ``seed``: each
    side's chain seeded from it (tests)."""
    seeds = random.Random(seed)
    BurstLoss(rate, burst)          # the values checked before anything is made
    _queue(d, {way: _Hold(0.0, 0.0, lambda: BurstLoss(rate, burst, random.Random(seeds.random())))
               for way in ("forward", "reverse")})


@dataclass(frozen=True)
class _Hold:
    """What one direction's reader does with each packet: drop it as ``loss`` says (a new chain
    per reader), else hold it ``delay_s`` +- ``jitter_s``."""

    delay_s: float
    jitter_s: float
    loss: Callable[[], BurstLoss] | None = None

    @property
    def idle(self) -> bool:
        return self.delay_s <= 0 and self.jitter_s <= 0 and self.loss is None


def _queue(d: Degradation, holds: dict[str, _Hold]) -> None:
    """A reader of the netfilter queue on each receiving side whose direction ``holds`` does
    something, its chain sending it the link's packets. Two sides in one namespace (the store's
    link) share ``d.queue`` when they do the same stateless thing (one delay both ways), else the
    reverse one reads ``d.reverse_queue``."""
    if d.delays:
        raise SetupError("this degradation already delays its packets")
    plan: list[tuple[str, int, _Hold, list[list[str]], tuple[str, str, str]]] = []
    for netns, way, sender, receiver, matches in _sides(d):
        hold = holds[way]
        if hold.idle:
            continue
        same = [i for i, item in enumerate(plan) if item[0] == netns]
        if not same:
            plan.append((netns, d.queue, hold, matches, (way, sender, receiver)))
            continue
        first = plan[same[0]]
        if hold == first[2] and hold.loss is None:      # one delay both ways: one reader, as ever
            plan[same[0]] = (netns, first[1], hold, first[3] + matches, ("both", d.node.node, "the store"))
            continue
        if d.reverse_queue is None:
            raise SetupError(f"the link {d.ident} reads its two directions apart in one namespace and needs a "
                             "second netfilter queue (Degradation.reverse_queue)")
        plan.append((netns, d.reverse_queue, hold, matches, (way, sender, receiver)))
    for netns, queue, hold, matches, direction in plan:
        sock = in_netns(netns, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12))
        line = DelayLine(sock, queue, hold.delay_s, hold.jitter_s, loss=hold.loss() if hold.loss else None)
        try:
            line.start()
        except (OSError, SetupError) as exc:
            sock.close()
            raise SetupError(f"could not read the netfilter queue {queue} in {netns}: {exc}") from exc
        d.delays.append(line)
        d.directions.append(direction)
        _chain(d, netns)
        for m in matches:
            _ipt(netns, "-A", d.chain, *m, "-j", "NFQUEUE", "--queue-num", str(queue), "--queue-bypass")


def _sides(d: Degradation) -> list[tuple[str, str, str, str, list[list[str]]]]:
    """(the receiving namespace, the direction, the sender and the receiver in words, the iptables
    matches of the packets it receives over the link) of every side of ``d``: the peers receive
    the node's packets (forward), the node receives the peers' (reverse); on the store's link the
    node's namespace receives both, told apart by the relay's port."""
    if d.store_port is not None:
        port = str(d.store_port)
        return [(d.node.netns, "forward", d.node.node, "the store", [["-p", "tcp", "--dport", port]]),
                (d.node.netns, "reverse", "the store", d.node.node, [["-p", "tcp", "--sport", port]])]
    peers = ", ".join(p.node for p in d.peers)
    return [(d.node.netns, "reverse", peers, d.node.node, [["-s", s] for p in d.peers for s in p.sources])] + \
        [(p.netns, "forward", d.node.node, p.node, [["-s", s] for s in d.node.sources]) for p in d.peers]


def _pairs(d: Degradation) -> list[tuple[str, list[list[str]]]]:
    """(a namespace, the iptables matches of the packets it receives over the link): each end
    matches the other's address; the store's link, the relay's port both ways on loopback."""
    if d.store_port is not None:
        port = str(d.store_port)
        return [(d.node.netns, [["-p", "tcp", "--dport", port], ["-p", "tcp", "--sport", port]])]
    return [(d.node.netns, [["-s", s] for p in d.peers for s in p.sources])] + \
        [(p.netns, [["-s", s] for s in d.node.sources]) for p in d.peers]


def set_rate(d: Degradation, kbit: int) -> None:
    """Cap what ``d.node`` sends to the peers and what they send it at ``kbit`` kbit/s each
    way (HTB; one class for all the peers together, as one link). Once per Degradation."""
    if kbit <= 0:
        raise SetupError(f"a rate cap is a positive number of kbit/s, not {kbit!r}")
    if d.store_port is not None:
        raise SetupError("a rate cap on the store's link is not made (its relay runs on loopback)")
    if d.qdiscs:
        raise SetupError("this degradation already caps the rate")
    burst = max(16_000, kbit * 1000 // 8 // 100)     # bytes: 10 ms at the cap, at least ~10 full frames
    theirs = [s for p in d.peers for s in p.sources]
    sides: list[tuple[str | None, str, str, list[str]]] = [
        (d.node.netns, "eth0", "dst", theirs),     # the node's egress
        (None, d.node.host_veth, "src", theirs),   # towards the node
    ]
    for netns, dev, direction, addresses in sides:
        existing = _run(_in(netns, ["tc", "qdisc", "show", "dev", dev, "root"]))
        if " htb " in existing or "qdisc tbf" in existing:
            raise SetupError(f"{dev} already has a shaping qdisc ({existing.strip()}): one rate cap per node")
        tc = _in(netns, ["tc"])
        _run([*tc, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb"])
        d.qdiscs.append((netns, dev))
        _run([*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", f"{kbit}kbit",
              "ceil", f"{kbit}kbit", "burst", str(burst), "cburst", str(burst)])
        for addr in addresses:
            _run([*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
                  "match", "ip", direction, addr, "flowid", "1:10"])


def remove(d: Degradation) -> list[str]:
    """Remove every chain and qdisc ``d`` made; idempotent (a namespace already gone is nothing
    to remove). Returns what could not be removed (empty: all clean)."""
    errors: list[str] = []
    for netns in list(d.chains):
        if netns_exists(netns):
            for hook in d.hooks:
                _ipt(netns, "-D", hook, "-i", d.iface, "-j", d.chain, check=False)
            _ipt(netns, "-F", d.chain, check=False)
            proc = subprocess.run(_in(netns, ["iptables", "-w", "5", "-X", d.chain]), capture_output=True,
                                  text=True, timeout=30, check=False)
            if proc.returncode != 0 and "No chain" not in proc.stderr and "does not exist" not in proc.stderr:
                errors.append(f"chain {d.chain} in {netns}: {proc.stderr.strip()}")
                continue
        d.chains.remove(netns)
    for line in list(d.delays):      # after the rules: nothing is queued any more; what is held goes now
        try:
            line.stop()
        except SetupError as exc:
            errors.append(str(exc))
        at = d.delays.index(line)
        del d.delays[at]
        if at < len(d.directions):
            del d.directions[at]
    for where, dev in list(d.qdiscs):
        gone = (where is not None and not netns_exists(where)) or \
            (where is None and not Path(f"/sys/class/net/{dev}").exists())
        if not gone:
            proc = subprocess.run(_in(where, ["tc", "qdisc", "del", "dev", dev, "root"]), capture_output=True,
                                  text=True, timeout=30, check=False)
            if proc.returncode != 0 and "Cannot find device" not in proc.stderr:
                errors.append(f"qdisc on {dev}: {proc.stderr.strip()}")
                continue
        d.qdiscs.remove((where, dev))
    return errors


def leftovers(netns: str, host_veth: str, d: Degradation | None = None) -> list[str]:
    """Our rules, qdiscs and queues still on one node's link (empty: nothing left): EC- chains
    in its namespace, a netfilter queue bound there (a delay line's reader), a shaping qdisc
    on its eth0 or its host-side veth. With ``d``: only its chain and its queue (another fault's
    on the same node is not a leftover of this one's)."""
    mark = d.chain if d is not None else "EC-"
    found = [f"iptables {line}" for line in _ipt(netns, "-S", check=False).splitlines()
             if mark in line.split()[1:2] + line.split()[-1:] or (d is None and mark in line)]
    queues = _run(_in(netns, ["cat", "/proc/net/netfilter/nfnetlink_queue"]), check=False)
    found += [f"a netfilter queue still bound: {line.strip()}" for line in queues.splitlines()
              if line.strip() and (d is None or line.split()[0] in {str(q) for q in d.queues})]
    sides: tuple[tuple[str | None, str], ...] = ((netns, "eth0"), (None, host_veth))
    for ns, dev in sides:
        shown = _run(_in(ns, ["tc", "qdisc", "show", "dev", dev]), check=False)
        found += [f"{dev}: {line.strip()}" for line in shown.splitlines() if " htb " in line or "tbf" in line]
    return found


class Flapper:
    """Takes a link down for ``down_s`` then up for ``up_s``, over and over, from a thread, until
    ``stop()``; starts down. ``flaps`` holds each down window (start, end: time.time());
    an error of the thread is raised by ``stop()`` (never silent)."""

    def __init__(self, d: Degradation, down_s: float, up_s: float) -> None:
        if down_s <= 0 or up_s <= 0:
            raise SetupError(f"a flapping link needs down and up times above 0 (down {down_s}, up {up_s})")
        self.d, self.down_s, self.up_s = d, down_s, up_s
        self.flaps: list[tuple[float, float | None]] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"flap-{d.ident}", daemon=True)

    def start(self) -> None:
        set_loss(self.d, 1.0)       # down now, in the caller's thread: an error here is the caller's
        self.flaps.append((time.time(), None))
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.down_s):
                set_loss(self.d, 0.0)
                self.flaps[-1] = (self.flaps[-1][0], time.time())
                if self._stop.wait(self.up_s):
                    return
                set_loss(self.d, 1.0)
                self.flaps.append((time.time(), None))
        except (SetupError, OSError, subprocess.SubprocessError) as exc:
            self._error = exc

    def stop(self) -> None:
        """Stop flapping and leave the link up (its rules are removed by ``remove``). Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(60)
        if self.flaps and self.flaps[-1][1] is None:
            self.flaps[-1] = (self.flaps[-1][0], time.time())
        if self._error is not None:
            error, self._error = self._error, None
            raise SetupError(f"the flapping link {self.d.ident} failed: {error}") from error


# -- probing ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    """What crossed the link from one end to the other, measured."""

    sent: int
    echoed: int
    """UDP datagrams that came back (each crossed the link both ways)."""
    loss_each_way: float
    """1 - sqrt(echoed / sent): the loss of one direction, assuming both lose alike."""
    rtt_ms: float | None
    """The median round trip of the echoed datagrams."""
    kbit_s: float | None = None
    """TCP throughput from the node to the peer (None: not measured)."""
    seconds: float = 0.0
    arrived: int | None = None
    """Datagrams the echo received (crossed the node -> peer way); None: not seen (a connect probe)."""
    forward_ms: float | None = None
    """The median one-way delay node -> peer: the echo's receipt less the send (one clock)."""
    reverse_ms: float | None = None
    """The median one-way delay peer -> node: the echo's return less its receipt."""

    @property
    def loss_forward(self) -> float | None:
        """The share of datagrams lost node -> peer (None: not seen)."""
        return None if self.arrived is None or not self.sent else 1.0 - self.arrived / self.sent

    @property
    def loss_reverse(self) -> float | None:
        """The share of the datagrams that reached the echo whose echo was lost peer -> node."""
        return None if not self.arrived else max(0.0, 1.0 - self.echoed / self.arrived)

    def to_json(self) -> dict[str, float | int | None]:
        out: dict[str, float | int | None] = {
            "sent": self.sent, "echoed": self.echoed, "loss_each_way": round(self.loss_each_way, 4),
            "rtt_ms": None if self.rtt_ms is None else round(self.rtt_ms, 3),
            "kbit_s": None if self.kbit_s is None else round(self.kbit_s, 1), "seconds": round(self.seconds, 3)}
        if self.arrived is not None:    # the UDP probe's: each direction apart
            out.update({"arrived": self.arrived, "loss_forward": _r(self.loss_forward, 4),
                        "loss_reverse": _r(self.loss_reverse, 4), "forward_ms": _r(self.forward_ms, 3),
                        "reverse_ms": _r(self.reverse_ms, 3)})
        return out


def _r(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def in_netns(netns: str, fn: Callable[[], T], *, timeout_s: float = 30.0) -> T:
    """``fn()`` run by a throwaway thread that entered ``netns`` (setns changes only the calling
    thread, which then ends); sockets it creates stay in that namespace."""
    result: dict[str, object] = {}

    def body() -> None:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            with open(netns if netns.startswith("/") else Path("/var/run/netns") / netns, "rb") as ns:
                if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns into {netns}: {os.strerror(err)}")
            result["value"] = fn()
        except OSError as exc:
            result["error"] = exc

    thread = threading.Thread(target=body, name=f"links-{netns}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise SetupError(f"the probe inside {netns} did not finish in {timeout_s:g}s")
    if "error" in result:
        raise SetupError(f"probe inside {netns}: {result['error']}")
    return result["value"]  # type: ignore[return-value]


def probe(node: End, peer: End, *, count: int = 200, interval_s: float = 0.005, wait_s: float = 1.0,
          stream_s: float = 0.0) -> Probe:
    """Send ``count`` UDP datagrams from ``node`` to an echo in ``peer``'s namespace,
    ``interval_s`` apart, and wait ``wait_s`` for the last echoes; with ``stream_s`` > 0,
    also stream TCP from ``node`` to ``peer`` for that long. Blocks; bounded by
    count * interval_s + wait_s + 2 * stream_s + a few seconds."""
    if count < 1 or count > 100_000:
        raise SetupError(f"a probe sends 1 to 100000 datagrams, not {count}")
    began = time.monotonic()
    udp_srv = in_netns(peer.netns, lambda: _bound(socket.SOCK_DGRAM, peer.address))
    tcp_srv = in_netns(peer.netns, lambda: _bound(socket.SOCK_STREAM, peer.address)) if stream_s > 0 else None
    stop = threading.Event()
    arrived: dict[int, float] = {}
    echo = threading.Thread(target=_echo, args=(udp_srv, stop, arrived), name="links-echo", daemon=True)
    echo.start()
    try:
        client = in_netns(node.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        with client:
            rounds = _udp_rounds(client, udp_srv.getsockname(), count, interval_s, wait_s)
        kbit = _stream(node, tcp_srv, stream_s) if tcp_srv is not None else None
    finally:
        stop.set()
        echo.join(2.0)
        udp_srv.close()
        if tcp_srv is not None:
            tcp_srv.close()
    echoed = len(rounds)
    rtt = _median([back - out for out, back in rounds.values()])
    seen = {n: t for n, t in dict(arrived).items() if 0 <= n < count}
    forward = _median([seen[n] - rounds[n][0] for n in rounds if n in seen])
    reverse = _median([rounds[n][1] - seen[n] for n in rounds if n in seen])
    return Probe(sent=count, echoed=echoed, loss_each_way=1.0 - math.sqrt(echoed / count),
                 rtt_ms=None if rtt is None else rtt * 1000, kbit_s=kbit, seconds=time.monotonic() - began,
                 arrived=max(len(seen), echoed), forward_ms=None if forward is None else forward * 1000,
                 reverse_ms=None if reverse is None else reverse * 1000)


def probe_connects(node: End, port: int, *, count: int = 40, timeout_s: float = 10.0,
                   budget_s: float = 30.0) -> Probe:
    """Open up to ``count`` TCP connections, one after another, from inside ``node``'s namespace to
    127.0.0.1:``port`` (the store's relay) and close them, for at most ``budget_s`` (a delayed link
    makes each connect as slow as its round trip: 2.5 s each way would take 40 connects 200 s): a
    connect is a round trip (SYN, SYN-ACK); one that took over 0.9 s more than the quickest had one
    of them lost and retransmitted (Linux's first retransmit is at 1 s), as had one that failed.
    ``sent``: the connects made; ``echoed``: those with no retransmit; the round trip, their median.
    Blocks at most about budget_s + timeout_s."""
    def run() -> list[float | None]:
        took: list[float | None] = []
        start = time.monotonic()
        for _ in range(count):
            if took and time.monotonic() - start > budget_s:
                break
            began = time.monotonic()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
                    took.append(time.monotonic() - began)
            except OSError:
                took.append(None)
        return took

    began = time.monotonic()
    took = in_netns(node.netns, run, timeout_s=budget_s + timeout_s + 10)
    done = [t for t in took if t is not None]
    quickest = min(done, default=0.0)
    clean = sorted(t for t in done if t - quickest <= 0.9)
    return Probe(sent=len(took), echoed=len(clean), loss_each_way=1.0 - math.sqrt(len(clean) / len(took)),
                 rtt_ms=clean[len(clean) // 2] * 1000 if clean else None, seconds=time.monotonic() - began)


def _bound(kind: socket.SocketKind, address: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, kind)
    sock.bind((address, 0))
    if kind == socket.SOCK_STREAM:
        sock.listen(4)
    return sock


def _echo(sock: socket.socket, stop: threading.Event, arrived: dict[int, float] | None = None) -> None:
    """Send every datagram back; ``arrived``: each one's number and when it came (the first time)."""
    sock.settimeout(0.1)
    while not stop.is_set():
        try:
            data, addr = sock.recvfrom(2048)
        except TimeoutError:
            continue
        except OSError:
            return
        if arrived is not None and len(data) >= 4:
            arrived.setdefault(struct.unpack("!I", data[:4])[0], time.monotonic())
        sock.sendto(data, addr)


def _udp_rounds(client: socket.socket, server: tuple[str, int], count: int, interval_s: float,
                wait_s: float) -> dict[int, tuple[float, float]]:
    """(sent, came back) of each datagram that came back, by its number, each counted once
    (time.monotonic())."""
    sent_at: dict[int, float] = {}
    rtts: dict[int, tuple[float, float]] = {}
    client.setblocking(False)
    start = time.monotonic()
    deadline = start + count * interval_s + wait_s
    seq = 0
    while time.monotonic() < deadline and len(rtts) < count:
        now = time.monotonic()
        if seq < count and now >= start + seq * interval_s:
            sent_at[seq] = now
            client.sendto(struct.pack("!I", seq) + b"x" * 60, server)
            seq += 1
        try:
            data = client.recv(2048)
        except (BlockingIOError, InterruptedError):
            time.sleep(min(interval_s, 0.001))
            continue
        n = struct.unpack("!I", data[:4])[0]
        if n in sent_at and n not in rtts:
            rtts[n] = (sent_at[n], time.monotonic())
    return rtts


def _stream(node: End, server: socket.socket, seconds: float) -> float | None:
    """kbit/s the peer received of a TCP stream from ``node`` lasting about ``seconds``: the
    bytes it read over the time from its first read to its last."""
    got: list[tuple[int, float, float]] = []

    def receive() -> None:
        server.settimeout(seconds + 5)
        try:
            conn, _ = server.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(1.0)
            total, first, last = 0, 0.0, 0.0
            end = time.monotonic() + seconds + 5
            while time.monotonic() < end:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                last = time.monotonic()
                first = first or last
                total += len(chunk)
            got.append((total, first, last))

    reader = threading.Thread(target=receive, name="links-stream", daemon=True)
    reader.start()
    client = in_netns(node.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    with client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)  # little queued beyond the cap
        client.settimeout(seconds + 5)
        client.connect(server.getsockname())
        began = time.monotonic()
        payload = b"\0" * 16384
        while time.monotonic() - began < seconds:
            try:
                client.send(payload)
            except OSError:
                break
        client.shutdown(socket.SHUT_WR)
    reader.join(seconds + 10)
    if not got or got[0][2] <= got[0][1]:
        return None
    total, first, last = got[0]
    return total * 8 / 1000 / (last - first)
