"""CEDAR framing pinned against the bytes real HTCondor daemons put on the wire."""

from __future__ import annotations

import pytest
from wire_captures import stream, tcp_streams

from execd.errors import LocalProtocolError, RemoteProtocolError
from execd.wire.framing import (
    MAX_PACKET_BYTES,
    PacketParser,
    chunk_payload,
    encode_header,
    frame_plain,
    parse_header,
    unframe_plain,
)


def _packets(data: bytes) -> list[tuple[bool, int]]:
    parser = PacketParser()
    packets = parser.feed(data)
    assert parser.pending == 0
    return [(p.end, len(p.body)) for p in packets]


def test_client_handshake_packets_of_a_real_update() -> None:
    # pyupdate.pcap: shared-port request, DC_AUTHENTICATE + policy ad, method mask,
    # FS reply, then the encrypted UPDATE_STARTD_AD payload.
    client = stream("pyupdate.pcap", 5268, 2673)
    assert _packets(client) == [(True, 42), (True, 511), (True, 8), (True, 23), (True, 1015)]
    server = stream("pyupdate.pcap", 2673, 5268)
    assert _packets(server) == [(True, 449), (True, 8), (True, 34), (True, 8), (True, 8),
                                (True, 295)]  # fmt: skip


def test_multi_packet_message_is_joined() -> None:
    # job1.pcap: the collector answers a schedd's query in one message of two packets.
    data = stream("job1.pcap", 2673, 20141)
    assert _packets(data) == [(True, 172), (False, 4123), (True, 2574)]
    assert [len(m) for m in unframe_plain(data)] == [172, 4123 + 2574]


def test_every_captured_stream_is_whole_packets() -> None:
    for name in ("ping.pcap", "pyupdate.pcap", "job1.pcap"):
        for key, data in tcp_streams(name).items():
            parser = PacketParser()
            packets = parser.feed(data)
            assert packets and parser.pending == 0, (name, key)
            assert packets[-1].end, (name, key)


def test_header_matches_htcondors_send_header() -> None:
    # ping.log: "Send Header contents: 01 00 00 00 2f" for the 47-byte shared-port request.
    assert encode_header(True, 47).hex(" ") == "01 00 00 00 2f"
    first = stream("ping.pcap", 22423, 2673)
    assert first[:5].hex(" ") == "01 00 00 00 2f"
    assert frame_plain(unframe_plain(first)[0]) == first[:52]


def test_chunking_flags_only_the_last_packet() -> None:
    chunks = chunk_payload(b"x" * 10000, 4096)
    assert [(end, len(c)) for end, c in chunks] == [(False, 4096), (False, 4096), (True, 1808)]
    assert unframe_plain(frame_plain(b"y" * 10000)) == [b"y" * 10000]


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        (bytes([2, 0, 0, 0, 8]), "bad end flag 2"),
        (bytes([1, 0, 0x10, 0, 1]), "over the 1048576-byte limit"),
        (bytes([1, 0xFF, 0xFF, 0xFF, 0xFF]), "over the 1048576-byte limit"),
        (bytes([0, 0, 0, 0, 0]), "empty packet"),
        (bytes([1, 0, 0]), "3 bytes, not 5"),
    ],
)
def test_bad_headers_are_refused_naming_the_problem(header: bytes, problem: str) -> None:
    with pytest.raises(RemoteProtocolError, match=problem):
        parse_header(header)


def test_oversized_packet_refused_before_its_body_arrives() -> None:
    parser = PacketParser()
    with pytest.raises(RemoteProtocolError, match="limit"):
        parser.feed(encode_header(True, MAX_PACKET_BYTES)[:1] + b"\x00\x10\x00\x01")


def test_largest_packet_is_accepted() -> None:
    body = b"z" * MAX_PACKET_BYTES
    (packet,) = PacketParser().feed(encode_header(True, MAX_PACKET_BYTES) + body)
    assert packet.end and packet.body == body


def test_truncated_stream_is_an_error() -> None:
    data = stream("pyupdate.pcap", 2673, 5268)
    with pytest.raises(RemoteProtocolError, match="ends inside a message"):
        unframe_plain(data[:-1])
    with pytest.raises(RemoteProtocolError, match="ends inside a message"):
        unframe_plain(frame_plain(b"a" * 5000, 4096)[:4101])  # first packet only, not end


def test_sending_nothing_or_too_much_is_our_bug() -> None:
    with pytest.raises(LocalProtocolError):
        chunk_payload(b"")
    with pytest.raises(LocalProtocolError):
        encode_header(True, MAX_PACKET_BYTES + 1)
