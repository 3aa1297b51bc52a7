"""Packets held in user space for a while, then let go (or dropped): a delay line over the netfilter queue.

This kernel has no ``sch_netem``, so added latency is made the other way netem's users did
before it: an iptables rule sends a link's packets to an NFQUEUE, a reader holds each one's
verdict for the delay (plus jitter) and then accepts it; the kernel re-injects the packet
where it left. The reader speaks nfnetlink_queue over a raw netlink socket (stdlib only:
PyPI's netfilterqueue needs libnetfilter-queue-dev), created inside the node's namespace
(a netlink socket belongs to the namespace it was made in). Only metadata is copied to user
space (``NFQNL_COPY_META``): the verdict names the packet by id, its bytes never leave the
kernel.

The same reader makes bursty loss (:class:`BurstLoss`, a Gilbert-Elliott chain), which
iptables' ``statistic`` match cannot: it decides per packet, in the order the packets were
queued, to drop it (an ``NF_DROP`` verdict at once) or to hold and accept it.

The reader is a thread of the runner, not a process: nothing of it outlives the runner. Its
rules use ``--queue-bypass``: with no reader bound, packets pass unqueued, never dropped.
On ``stop()`` every packet still held is accepted at once, then the queue is unbound.
"""
from __future__ import annotations

import heapq
import random
import select
import socket
import struct
import threading
import time

from elastic_chaos.errors import SetupError

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN = 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQNL_COPY_META = 1
NF_DROP, NF_ACCEPT = 0, 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR, NLMSG_DONE = 2, 3
MAX_HELD = 20_000
"""The most packets the kernel queues for the reader (beyond: dropped, as a full netem queue)."""


def _attr(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * ((4 - length % 4) % 4)


def _message(msg: int, queue: int, attrs: bytes, *, seq: int, flags: int = NLM_F_REQUEST) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq, 0) + body


def verdict(queue: int, packet_id: int, *, seq: int = 0, accept: bool = True) -> bytes:
    """The message that accepts (``accept=False``: drops) the held packet ``packet_id`` of ``queue``."""
    return _message(NFQNL_MSG_VERDICT, queue, _attr(NFQA_VERDICT_HDR, struct.pack(
        "!II", NF_ACCEPT if accept else NF_DROP, packet_id)), seq=seq)


def packet_ids(data: bytes) -> list[int]:
    """The ids of the queued packets in one read of the socket (other messages skipped)."""
    ids, offset = [], 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16 or offset + length > len(data):
            break
        if kind == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
            at = offset + 20                       # nlmsghdr (16) + nfgenmsg (4)
            while at + 4 <= offset + length:
                alen, atype = struct.unpack_from("=HH", data, at)
                if alen < 4:
                    break
                if atype & 0x3FFF == NFQA_PACKET_HDR and alen >= 8:
                    ids.append(struct.unpack_from("!I", data, at + 4)[0])
                at += (alen + 3) & ~3
        offset += (length + 3) & ~3
    return ids


def independent_burst(rate: float) -> float:
    """The mean burst length (packets lost in a row) that independent loss at ``rate`` already has:
    1 / (1 - rate). A bursty loss asks at least that."""
    return 1.0 / (1.0 - rate)


class BurstLoss:
    """Bursty loss at a mean ``rate``, in bursts of ``burst`` packets on average: a two-state
    (Gilbert-Elliott) chain stepped once per packet one reader sees, in the order they were queued.

    In the bad state every packet is dropped, in the good state none (netem's ``loss gemodel p r``
    with ``1-h`` = 1 and ``1-k`` = 0, Gilbert's original model). From bad the chain turns good with
    probability ``r`` = 1 / burst, so a burst lasts ``burst`` packets on average (geometrically);
    from good it turns bad with probability ``p`` = rate * r / (1 - rate), which puts ``rate`` of
    the packets in the bad state in the long run (p / (p + r)). ``burst`` = 1 / (1 - rate) is
    independent loss (p + r = 1: a packet's fate does not depend on the last one's); more clusters
    the same losses into longer runs. The chain starts in its stationary state (bad with
    probability ``rate``). ``packets``, ``dropped`` and ``bursts`` (runs of drops) count what it
    decided."""

    def __init__(self, rate: float, burst: float, rng: random.Random | None = None) -> None:
        if not 0.0 < rate < 1.0:
            raise SetupError(f"a bursty loss rate is above 0 and below 1, not {rate!r}")
        if not burst >= independent_burst(rate) - 1e-9:
            raise SetupError(f"a mean burst of {burst:g} packets at a loss rate of {rate:g} is less clustered "
                             f"than independent loss (whose runs average {independent_burst(rate):.3g} packets)")
        self.rate, self.burst = rate, burst
        self.leave_bad = 1.0 / burst
        self.enter_bad = min(1.0, rate * self.leave_bad / (1.0 - rate))
        self._random = rng if rng is not None else random.Random()
        self.bad = self._random.random() < rate
        self._last_dropped = False
        self.packets = self.dropped = self.bursts = 0

    def drop(self) -> bool:
        """Whether the next packet is dropped; steps the chain."""
        lost = self.bad
        self.packets += 1
        if lost:
            self.dropped += 1
            self.bursts += 0 if self._last_dropped else 1
        self._last_dropped = lost
        draw = self._random.random()
        self.bad = draw >= self.leave_bad if self.bad else draw < self.enter_bad
        return lost

    def tally(self) -> dict[str, float | int | None]:
        """What it decided so far: packets seen, dropped, bursts, the loss and the mean burst."""
        return {"packets": self.packets, "dropped": self.dropped, "bursts": self.bursts,
                "loss": round(self.dropped / self.packets, 4) if self.packets else None,
                "mean_burst": round(self.dropped / self.bursts, 3) if self.bursts else None}


class DelayLine:
    """Holds every packet of queue ``queue`` (on the socket ``sock``, made in the namespace whose
    rules feed the queue) ``delay_s`` plus a uniform jitter of +-``jitter_s``, then accepts it;
    with ``loss`` (a BurstLoss), first drops the packets its chain says, at once.
    ``start()`` binds the queue (SetupError when the kernel refuses) and starts the thread;
    ``stop()`` accepts everything still held and unbinds. ``held``, ``passed`` and ``dropped``
    count packets."""

    def __init__(self, sock: socket.socket, queue: int, delay_s: float, jitter_s: float = 0.0,
                 *, seed: int | None = None, loss: BurstLoss | None = None) -> None:
        if not 0 <= queue <= 65535:
            raise SetupError(f"a netfilter queue number is 0 to 65535, not {queue}")
        if delay_s < 0 or jitter_s < 0 or jitter_s > delay_s:
            raise SetupError(f"a delay line needs 0 <= jitter <= delay (delay {delay_s}s, jitter {jitter_s}s)")
        self.sock, self.queue, self.delay_s, self.jitter_s = sock, queue, delay_s, jitter_s
        self.loss = loss
        self.dropped = 0
        self._random = random.Random(seed)
        self._heap: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._seq = 0
        self.passed = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"nfqueue-{queue}", daemon=True)

    def _request(self, msg: int, attrs: bytes) -> None:
        """Send a config message and wait for its ack; SetupError with the kernel's errno."""
        self._seq += 1
        self.sock.sendto(_message(msg, self.queue, attrs, seq=self._seq, flags=NLM_F_REQUEST | NLM_F_ACK), (0, 0))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            data = self.sock.recv(1 << 20)
            for pid in packet_ids(data):        # a packet queued meanwhile is let go at once
                self.sock.sendto(verdict(self.queue, pid), (0, 0))
            length, kind, _flags, seq = struct.unpack_from("=IHHI", data)
            if kind == NLMSG_ERROR and seq == self._seq:
                err = struct.unpack_from("=i", data, 16)[0]
                if err != 0:
                    raise SetupError(f"the netfilter queue {self.queue} refused a config message: errno {-err}")
                return
        raise SetupError(f"the netfilter queue {self.queue} did not answer a config message in 5 s")

    def start(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_BIND, 0, 0)))
        self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_PARAMS, struct.pack("!IB", 0, NFQNL_COPY_META)) +
                      _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", MAX_HELD)))
        self._thread.start()

    @property
    def held(self) -> int:
        return len(self._heap)

    def _hold(self, ids: list[int]) -> None:
        now = time.monotonic()
        for pid in ids:
            if self.loss is not None and self.loss.drop():
                self.sock.sendto(verdict(self.queue, pid, accept=False), (0, 0))
                self.dropped += 1
                continue
            jitter = self._random.uniform(-self.jitter_s, self.jitter_s) if self.jitter_s else 0.0
            heapq.heappush(self._heap, (now + self.delay_s + jitter, pid))

    def _release(self, until: float) -> None:
        while self._heap and self._heap[0][0] <= until:
            _, pid = heapq.heappop(self._heap)
            self.sock.sendto(verdict(self.queue, pid), (0, 0))
            self.passed += 1

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                wait = 0.05 if not self._heap else max(0.0, min(0.05, self._heap[0][0] - time.monotonic()))
                ready, _, _ = select.select([self.sock], [], [], wait)
                if ready:
                    try:
                        self._hold(packet_ids(self.sock.recv(1 << 20)))
                    except BlockingIOError:
                        pass
                    except OSError as exc:
                        if exc.errno != 105:      # ENOBUFS: some packet messages were lost; go on
                            raise
                self._release(time.monotonic())
        except Exception as exc:  # noqa: BLE001 - kept, and raised by stop(): never a silent failure
            # a reader that stopped must not keep the queue bound (every packet would wait
            # forever): closing the socket unbinds it, and --queue-bypass lets packets pass
            self.error = exc
            self.sock.close()

    def stop(self) -> None:
        """Accept every held packet now, unbind the queue and close the socket. Idempotent;
        SetupError when the thread had failed (its packets were passed or bypassed)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(10)
        if self.sock.fileno() >= 0:
            try:
                self._release(float("inf"))
                self._request(NFQNL_MSG_CONFIG, _attr(NFQA_CFG_CMD, struct.pack("=BBH", NFQNL_CFG_CMD_UNBIND, 0, 0)))
            except (OSError, SetupError):
                pass    # closing the socket unbinds it too
            self.sock.close()
        if self.error is not None:
            error, self.error = self.error, None
            raise SetupError(f"the delay line of queue {self.queue} failed: {error}") from error
