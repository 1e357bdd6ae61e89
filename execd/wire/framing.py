"""CEDAR packet framing: a message is a run of packets, each a 5-byte header + payload.

Header byte 0 is the end flag (1: last packet of the message, 0: more follow); bytes
1-4 are the payload length, big-endian. HTCondor's receivers refuse packets over 1 MiB
and packets of length 0 (reli_sock.cpp, rcv_packet); so does execd. This module is
sans-IO: it turns bytes into packets and payloads into packets, nothing more.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from execd.errors import LocalProtocolError, RemoteProtocolError

HEADER_SIZE = 5
# A receiver refuses a packet whose length field is larger than this.
MAX_PACKET_BYTES = 1024 * 1024
# What execd puts in one packet when it sends (HTCondor's own buffer size).
SEND_PACKET_BYTES = 4096
# A whole message (all its packets) larger than this is refused: without a bound a peer
# could make execd buffer without end by never setting the end flag.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_HEADER = struct.Struct("!BI")


@dataclass(frozen=True)
class Packet:
    """One packet as it arrived: its raw header (AES-GCM authenticates it) and body."""

    end: bool
    header: bytes
    body: bytes


def encode_header(end: bool, length: int) -> bytes:
    if not 0 < length <= MAX_PACKET_BYTES:
        raise LocalProtocolError(f"packet length {length} outside 1..{MAX_PACKET_BYTES}")
    return _HEADER.pack(1 if end else 0, length)


def parse_header(header: bytes) -> tuple[bool, int]:
    """(end, length) of a 5-byte header; RemoteProtocolError naming what is wrong."""
    if len(header) != HEADER_SIZE:
        raise RemoteProtocolError(f"packet header has {len(header)} bytes, not {HEADER_SIZE}")
    flag, length = _HEADER.unpack(header)
    if flag not in (0, 1):
        raise RemoteProtocolError(f"packet header has bad end flag {flag} (header {header.hex()})")
    if length == 0:
        raise RemoteProtocolError("packet header announces an empty packet")
    if length > MAX_PACKET_BYTES:
        raise RemoteProtocolError(
            f"packet of {length} bytes is over the {MAX_PACKET_BYTES}-byte limit"
        )
    return flag == 1, length


def chunk_payload(payload: bytes, size: int = SEND_PACKET_BYTES) -> list[tuple[bool, bytes]]:
    """Split a message payload into (end, chunk) pieces, the last one flagged end."""
    if not payload:
        raise LocalProtocolError("a CEDAR message cannot be empty")
    chunks = [payload[i : i + size] for i in range(0, len(payload), size)]
    return [(i == len(chunks) - 1, chunk) for i, chunk in enumerate(chunks)]


def frame_plain(payload: bytes, size: int = SEND_PACKET_BYTES) -> bytes:
    """A whole unencrypted message as it goes on the wire."""
    return b"".join(encode_header(end, len(c)) + c for end, c in chunk_payload(payload, size))


class PacketParser:
    """Incremental packet reader: feed bytes, take whole packets.

    Holds at most one partial packet; a header that announces more than the limit is
    refused as soon as its 5 bytes are in, before any body is buffered.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._want: tuple[bool, int, bytes] | None = None

    def feed(self, data: bytes) -> list[Packet]:
        self._buf += data
        packets: list[Packet] = []
        while True:
            if self._want is None:
                if len(self._buf) < HEADER_SIZE:
                    return packets
                header = bytes(self._buf[:HEADER_SIZE])
                end, length = parse_header(header)
                del self._buf[:HEADER_SIZE]
                self._want = (end, length, header)
            end, length, header = self._want
            if len(self._buf) < length:
                return packets
            body = bytes(self._buf[:length])
            del self._buf[:length]
            self._want = None
            packets.append(Packet(end, header, body))

    @property
    def pending(self) -> int:
        """Bytes buffered that do not yet make a whole packet (0 at a packet boundary)."""
        return len(self._buf) + (HEADER_SIZE if self._want else 0)


def unframe_plain(data: bytes) -> list[bytes]:
    """Every whole unencrypted message in `data`; trailing partial bytes are an error."""
    parser = PacketParser()
    messages: list[bytes] = []
    current = bytearray()
    for packet in parser.feed(data):
        current += packet.body
        if len(current) > MAX_MESSAGE_BYTES:
            raise RemoteProtocolError(f"message over the {MAX_MESSAGE_BYTES}-byte limit")
        if packet.end:
            messages.append(bytes(current))
            current.clear()
    if parser.pending or current:
        raise RemoteProtocolError(
            f"stream ends inside a message ({parser.pending + len(current)} bytes left over)"
        )
    return messages
