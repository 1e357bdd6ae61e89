"""Bad input to the wire decoders: garbage, truncated packets, oversized lengths, bad
tags, a peer that stops mid-message. Always a ProtocolError naming the problem, never
another exception, never a hang (every wait below has a deadline far under the test's)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from wire_captures import stream
from wire_pairs import channel_pair, raw_pair

from execd.errors import ProtocolError, RemoteProtocolError
from execd.wire.claim_messages import (
    decode_activate_claim,
    decode_claim_only,
    decode_deactivate_reply,
    decode_request_claim,
    decode_request_claim_reply,
)
from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import PacketParser, unframe_plain
from execd.wire.security import ClientSecurity, start_command
from execd.wire.server import CommandServer, ServerSecurity
from execd.wire.sinful import parse_sinful

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REAL_MESSAGES = [m for sp, dp in ((5268, 2673), (2673, 5268))
                 for m in unframe_plain(stream("pyupdate.pcap", sp, dp))[:4]]  # fmt: skip
KEY = bytes(32)


def _mutations() -> st.SearchStrategy[bytes]:
    """Real captured messages, cut short, with bytes flipped or inserted."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(draw(st.sampled_from(REAL_MESSAGES)))
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(["flip", "cut", "insert"]))
            pos = draw(st.integers(0, max(len(data) - 1, 0)))
            if kind == "flip" and data:
                data[pos] ^= draw(st.integers(1, 255))
            elif kind == "cut":
                del data[pos:]
            else:
                data[pos:pos] = draw(st.binary(min_size=1, max_size=9))
        return bytes(data)

    return mutate()


ANY_PAYLOAD = st.one_of(st.binary(max_size=600), _mutations())


@FAST
@given(ANY_PAYLOAD, st.booleans(), st.lists(st.sampled_from(
    ["int", "int32", "char", "double", "string", "bytes"]), max_size=12))  # fmt: skip
def test_decoder_only_raises_protocol_errors(payload: bytes, encrypted: bool,
                                             reads: list[str]) -> None:  # fmt: skip
    dec = Decoder(payload, encrypted=encrypted)
    try:
        for read in reads:
            if read == "bytes":
                dec.get_bytes(dec.get_int() if dec.remaining >= 8 else 3)
            else:
                getattr(dec, f"get_{read}")()
        dec.finish()
    except RemoteProtocolError:
        pass


@FAST
@given(ANY_PAYLOAD, st.booleans())
def test_classad_decoder_only_raises_protocol_errors(payload: bytes, encrypted: bool) -> None:
    dec = Decoder(payload, encrypted=encrypted)
    try:
        if payload[:8] == struct.pack("!q", 60010):
            dec.get_int()
        to_classad(decode_ad(dec))
    except RemoteProtocolError:
        pass


@FAST
@given(st.lists(st.text(max_size=40), max_size=6))
def test_arbitrary_attribute_lines_only_raise_protocol_errors(lines: list[str]) -> None:
    enc = Encoder().put_int(len(lines))
    try:
        for line in lines:
            enc.put_string(line)
    except ProtocolError:
        return  # a NUL: not a sendable string at all
    with contextlib.suppress(RemoteProtocolError):
        to_classad(decode_ad(Decoder(enc.put_string("").put_string("").payload())))


@FAST
@given(st.one_of(st.binary(max_size=300),
                 st.builds(lambda a, b: a + b, st.binary(max_size=5), st.binary(max_size=40))))
def test_framing_only_raises_protocol_errors(data: bytes) -> None:  # fmt: skip
    with contextlib.suppress(RemoteProtocolError):
        unframe_plain(data)
    with contextlib.suppress(RemoteProtocolError):
        PacketParser().feed(data)


async def _recv_from(garbage: bytes, *, encrypted: bool, close: bool,
                     timeout_s: float = 0.3) -> None:  # fmt: skip
    ours, peer = await raw_pair(timeout_s=timeout_s)
    try:
        if encrypted:
            ours.enable_crypto(KEY)
        peer.write(garbage)
        if close:
            peer.close()
        for _ in range(3):
            await ours.recv()
    finally:
        await ours.close()
        peer.close()


@SLOW
@given(ANY_PAYLOAD, st.booleans(), st.booleans())
def test_channel_recv_of_garbage_is_a_protocol_error(garbage: bytes, encrypted: bool,
                                                     close: bool) -> None:  # fmt: skip
    with pytest.raises(RemoteProtocolError):
        asyncio.run(_recv_from(garbage, encrypted=encrypted, close=close))


def test_oversized_length_is_refused_without_waiting_for_the_body() -> None:
    # No body and no EOF follow: a refusal that named the timeout would mean we waited.
    with pytest.raises(RemoteProtocolError, match="over the 1048576-byte limit"):
        asyncio.run(_recv_from(b"\x01\x7f\xff\xff\xff", encrypted=False, close=False,
                               timeout_s=30))  # fmt: skip


def test_peer_stopping_mid_message_costs_one_deadline() -> None:
    with pytest.raises(RemoteProtocolError, match=r"no whole message within 0\.3 s"):
        asyncio.run(_recv_from(b"\x00\x00\x00\x00\x10" + bytes(16), encrypted=False, close=False))
    with pytest.raises(RemoteProtocolError, match="closed the connection inside a packet body"):
        asyncio.run(_recv_from(b"\x01\x00\x00\x00\x10" + bytes(4), encrypted=False, close=True,
                               timeout_s=30))  # fmt: skip


def test_bad_tag_on_encrypted_packet() -> None:
    async def run() -> None:
        a, b = await channel_pair(timeout_s=1)
        try:
            a.enable_crypto(KEY)
            b.enable_crypto(bytes([1]) * 32)  # the peer has another key
            await a.send(b"hello")
            await b.recv()
        finally:
            await a.close()
            await b.close()

    with pytest.raises(RemoteProtocolError, match="bad tag"):
        asyncio.run(run())


async def _handshake_against(garbage: bytes) -> None:
    ours, peer = await raw_pair(timeout_s=0.3)
    try:
        peer.write(garbage)
        peer.close()
        address = parse_sinful("<127.0.0.1:9618?sock=collector>")
        await start_command(ours, address, 0, ClientSecurity(timeout_s=0.3))
    finally:
        await ours.close()


@SLOW
@given(st.one_of(
    st.binary(max_size=200),
    st.lists(ANY_PAYLOAD.filter(bool), max_size=4).map(
        lambda ms: b"".join(struct.pack("!BI", 1, len(m)) + m for m in ms)),
))  # fmt: skip
def test_client_handshake_against_a_garbage_server(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        asyncio.run(_handshake_against(garbage))


CLIENT_HANDSHAKE = unframe_plain(stream("pyupdate.pcap", 5268, 2673))[1:4]


async def _feed_server(garbage: bytes) -> list[dict[str, object]]:
    server = CommandServer({60020: _never_called}, ServerSecurity(domain="d", timeout_s=0.3))
    await server.start()
    address = parse_sinful(server.address)
    try:
        with capture_logs() as events:
            reader, writer = await asyncio.open_connection(address.host, address.port)
            writer.write(garbage)
            await writer.drain()
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 5)  # the server hangs up: it never hangs
            writer.close()
            await asyncio.wait_for(server.wait_idle(), 5)
        return events
    finally:
        await server.close()


async def _never_called(channel: object, command: int, peer: object) -> None:
    raise AssertionError("garbage reached a command handler")


@SLOW
@given(st.one_of(
    st.binary(max_size=300),
    st.lists(st.sampled_from(CLIENT_HANDSHAKE).map(lambda m: m), min_size=1, max_size=3).map(
        lambda ms: b"".join(struct.pack("!BI", 1, len(m)) + m for m in ms)),
    st.lists(ANY_PAYLOAD.filter(bool), max_size=3).map(
        lambda ms: b"".join(struct.pack("!BI", 1, len(m)) + m for m in ms)),
))  # fmt: skip
def test_server_drops_garbage_with_a_logged_reason(garbage: bytes) -> None:
    events = asyncio.run(_feed_server(garbage))
    dropped = [e for e in events if e["event"] == "wire_connection_dropped"]
    assert len(dropped) == 1 and dropped[0]["reason"], events


@FAST
@given(ANY_PAYLOAD, st.sampled_from(["request", "reply", "activate", "deactivate", "claim"]))
def test_claim_message_decoders_only_raise_protocol_errors(payload: bytes, which: str) -> None:
    dec = Decoder(payload, encrypted=True)
    decode = {
        "request": decode_request_claim,
        "reply": decode_request_claim_reply,
        "activate": decode_activate_claim,
        "deactivate": decode_deactivate_reply,
        "claim": lambda d: decode_claim_only(d, "RELEASE_CLAIM"),
    }[which]
    with contextlib.suppress(RemoteProtocolError):
        decode(dec)
