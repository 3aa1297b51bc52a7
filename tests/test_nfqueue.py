"""The nfnetlink_queue messages the delay line speaks (elastic_chaos.host.nfqueue), byte for byte,
without a kernel: a packet message's ids read back, a verdict laid out as the kernel reads it."""
from __future__ import annotations

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
