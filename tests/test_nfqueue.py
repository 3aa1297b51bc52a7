"""The nfnetlink_queue messages the delay line speaks (elastic_chaos.host.nfqueue), byte for byte,
without a kernel: a packet message's ids read back, a verdict laid out as the kernel reads it; and
the Gilbert-Elliott chain that decides a bursty loss, over many packets with a seeded RNG."""
from __future__ import annotations

import math
import random
import socket
import struct

import pytest

from elastic_chaos.errors import SetupError
from elastic_chaos.host import nfqueue


def _packet_message(packet_id: int, *, extra_attr: bool = True) -> bytes:
    attrs = b""
    if extra_attr:      # an attribute before the header (NFQA_MARK, 4 bytes) is skipped
        attrs += struct.pack("=HH", 8, 3) + struct.pack("!I", 7)
    attrs += struct.pack("=HH", 11, nfqueue.NFQA_PACKET_HDR) + struct.pack("!IHB", packet_id, 0x0800, 1) + b"\0"
    body = struct.pack("=BBH", socket.AF_INET, 0, socket.htons(5)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (nfqueue.NFNL_SUBSYS_QUEUE << 8) | nfqueue.NFQNL_MSG_PACKET,
                       0, 0, 0) + body


def test_packet_ids_are_read_from_every_message_of_one_read() -> None:
    data = _packet_message(41) + _packet_message(42, extra_attr=False) + _packet_message(0xFFFFFFF0)
    assert nfqueue.packet_ids(data) == [41, 42, 0xFFFFFFF0]


def test_other_messages_and_a_truncated_tail_are_skipped() -> None:
    ack = struct.pack("=IHHII", 36, nfqueue.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", 0) + b"\0" * 16
    assert nfqueue.packet_ids(ack + _packet_message(9) + _packet_message(10)[:20]) == [9]


def test_a_verdict_accepts_the_packet_by_id_on_its_queue() -> None:
    msg = nfqueue.verdict(5, 1234)
    length, kind, flags = struct.unpack_from("=IHH", msg)
    assert length == len(msg) == 16 + 4 + 12
    assert kind == (nfqueue.NFNL_SUBSYS_QUEUE << 8) | nfqueue.NFQNL_MSG_VERDICT and flags == nfqueue.NLM_F_REQUEST
    assert struct.unpack_from("!H", msg, 18)[0] == 5        # res_id: the queue number, big-endian
    alen, atype = struct.unpack_from("=HH", msg, 20)
    assert (alen, atype) == (12, nfqueue.NFQA_VERDICT_HDR)
    assert struct.unpack_from("!II", msg, 24) == (nfqueue.NF_ACCEPT, 1234)


@pytest.mark.parametrize("queue, delay, jitter", [(70000, 0.01, 0.0), (1, -0.1, 0.0), (1, 0.01, 0.02)])
def test_a_delay_line_refuses_what_cannot_be(queue: int, delay: float, jitter: float) -> None:
    a, b = socket.socketpair()
    with a, b, pytest.raises(SetupError):
        nfqueue.DelayLine(a, queue, delay, jitter)


def test_a_drop_verdict_names_the_packet_with_nf_drop() -> None:
    msg = nfqueue.verdict(5, 1234, accept=False)
    assert struct.unpack_from("!II", msg, 24) == (nfqueue.NF_DROP, 1234) and nfqueue.NF_DROP == 0


def _runs(drops: list[bool]) -> list[int]:
    """The lengths of the runs of consecutive drops."""
    runs, n = [], 0
    for lost in drops:
        if lost:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs + ([n] if n else [])


@pytest.mark.parametrize("rate, burst", [(0.05, 4.0), (0.1, 2.0), (0.3, 3.0)])
def test_a_bursty_loss_keeps_its_mean_rate_and_its_mean_burst(rate: float, burst: float) -> None:
    n = 500_000
    chain = nfqueue.BurstLoss(rate, burst, random.Random(39))
    drops = [chain.drop() for _ in range(n)]
    runs = _runs(drops)
    # 4 sigma of each estimate: the chain's memory (l = 1 - p - r) widens the rate's; a run is geometric
    memory = 1 - 1 / burst - rate / (burst * (1 - rate))
    rate_sigma = math.sqrt((1 + memory) / (1 - memory) * rate * (1 - rate) / n)
    burst_sigma = math.sqrt(burst * (burst - 1)) / math.sqrt(n * rate / burst)
    assert abs(sum(drops) / n - rate) <= 4 * rate_sigma, (sum(drops) / n, rate_sigma)
    assert abs(sum(runs) / len(runs) - burst) <= 4 * burst_sigma, (sum(runs) / len(runs), burst_sigma)
    assert 4 * rate_sigma <= 0.15 * rate and 4 * burst_sigma <= 0.15 * burst     # the bounds say something
    # its own tally counts the same runs (what the report reads as "as dropped")
    tally = chain.tally()
    assert (tally["packets"], tally["dropped"], tally["bursts"]) == (len(drops), sum(drops), len(runs))


def test_a_burst_of_one_over_one_minus_the_rate_is_independent_loss() -> None:
    # p + r = 1: a packet's fate does not hang on the last one's (the chain's floor)
    rate = 0.2
    chain = nfqueue.BurstLoss(rate, nfqueue.independent_burst(rate), random.Random(7))
    drops = [chain.drop() for _ in range(200_000)]
    after_a_drop = [b for a, b in zip(drops, drops[1:], strict=False) if a]
    after_a_pass = [b for a, b in zip(drops, drops[1:], strict=False) if not a]
    assert sum(after_a_drop) / len(after_a_drop) == pytest.approx(rate, abs=0.01)
    assert sum(after_a_pass) / len(after_a_pass) == pytest.approx(rate, abs=0.01)
    # a bursty one clusters: after a drop, the next is lost far more often than the mean rate
    bursty = nfqueue.BurstLoss(rate, 5.0, random.Random(7))
    clustered = [bursty.drop() for _ in range(200_000)]
    again = [b for a, b in zip(clustered, clustered[1:], strict=False) if a]
    assert sum(again) / len(again) == pytest.approx(1 - 1 / 5.0, abs=0.01)


def test_the_same_seed_drops_the_same_packets() -> None:
    a, b = nfqueue.BurstLoss(0.05, 4, random.Random(3)), nfqueue.BurstLoss(0.05, 4, random.Random(3))
    assert [a.drop() for _ in range(5000)] == [b.drop() for _ in range(5000)]


@pytest.mark.parametrize("rate, burst, words", [
    (0.0, 4.0, "above 0 and below 1"), (1.0, 4.0, "above 0 and below 1"),
    (0.05, 1.0, "less clustered than independent loss"), (0.5, 1.5, "less clustered than independent loss"),
])
def test_a_bursty_loss_refuses_what_cannot_be(rate: float, burst: float, words: str) -> None:
    with pytest.raises(SetupError, match=words):
        nfqueue.BurstLoss(rate, burst)
