"""Read the TCP streams of the pcap captures in tests/fixtures/htcondor-captures.

A small reader of classic pcap files (Ethernet, IPv4/IPv6, TCP) that reassembles each
direction of each connection by sequence number: enough to get the exact bytes HTCondor
put on the wire, with no dependency beyond the standard library.
"""

from __future__ import annotations

import struct
from functools import cache
from pathlib import Path

from execd.wire.encoding import Decoder, Encoder

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "htcondor-captures"

Key = tuple[str, int, str, int]  # source ip, source port, destination ip, destination port


def _ip(raw: bytes) -> str:
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    return raw.hex()


@cache
def tcp_streams(name: str) -> dict[Key, bytes]:
    """Every direction of every TCP connection in the capture, in order of first packet."""
    data = (CAPTURES / name).read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", data[:24])
    assert magic == 0xA1B2C3D4 and linktype == 1, "classic little-endian Ethernet pcap"
    segments: dict[Key, dict[int, bytes]] = {}
    initial: dict[Key, int] = {}
    offset = 24
    while offset < len(data):
        _, _, caplen, _ = struct.unpack("<IIII", data[offset : offset + 16])
        frame = data[offset + 16 : offset + 16 + caplen]
        offset += 16 + caplen
        ethertype = struct.unpack("!H", frame[12:14])[0]
        if ethertype == 0x0800:
            ihl = (frame[14] & 0x0F) * 4
            total = struct.unpack("!H", frame[16:18])[0]
            proto, src, dst = frame[23], _ip(frame[26:30]), _ip(frame[30:34])
            l4 = frame[14 + ihl : 14 + total]
        elif ethertype == 0x86DD:
            length = struct.unpack("!H", frame[18:20])[0]
            proto, src, dst = frame[20], _ip(frame[22:38]), _ip(frame[38:54])
            l4 = frame[54 : 54 + length]
        else:
            continue
        if proto != 6:
            continue
        sport, dport, seq = struct.unpack("!HHI", l4[:8])
        key = (src, sport, dst, dport)
        flags = l4[13]
        if flags & 0x02:  # SYN: the stream starts at seq + 1
            initial[key] = seq + 1
        payload = l4[(l4[12] >> 4) * 4 :]
        if payload:
            segments.setdefault(key, {})[seq] = payload
    streams: dict[Key, bytes] = {}
    for key, segs in segments.items():
        start = initial.get(key, min(segs))
        buf = bytearray()
        for seq in sorted(segs, key=lambda s: (s - start) % (1 << 32)):
            rel = (seq - start) % (1 << 32)
            buf[rel : rel + len(segs[seq])] = segs[seq]
        streams[key] = bytes(buf)
    return streams


def stream(name: str, sport: int, dport: int) -> bytes:
    """The one direction of a connection with these ports."""
    (found,) = [v for k, v in tcp_streams(name).items() if k[1] == sport and k[3] == dport]
    return found


def decrypt_conversation(name: str, client_port: int, server_port: int,
                         key: bytes) -> tuple[list[bytes], list[bytes]]:  # fmt: skip
    """The encrypted messages of a resumed-session connection, both ways, in clear.

    The client's shared-port request (if any) is not hashed; everything in clear after
    it is, and the first encrypted packet each way carries both digests in its AAD.
    """
    import hashlib

    from execd.wire.crypto import PacketOpener
    from execd.wire.framing import PacketParser

    out: list[list[bytes]] = []
    client = PacketParser().feed(stream(name, client_port, server_port))
    server = PacketParser().feed(stream(name, server_port, client_port))
    if client and client[0].body[:8] == (75).to_bytes(8, "big"):
        client = client[1:]  # the shared-port request
    plain_counts = []
    for packets in (client, server):
        n = 0
        while n < len(packets) and n < 2 and _is_cleartext(packets[n].body):
            n += 1
        plain_counts.append(n)
    digests = [hashlib.sha256(b"".join(p.header + p.body for p in ps[:n])).digest()
               for ps, n in zip((client, server), plain_counts, strict=True)]  # fmt: skip
    for i, (packets, n) in enumerate(zip((client, server), plain_counts, strict=True)):
        opener = PacketOpener(key)
        mine, theirs = digests[i], digests[1 - i]
        messages, current, first = [], bytearray(), True
        for packet in packets[n:]:
            aad = mine + theirs + packet.header if first else packet.header
            first = False
            current += opener.open(packet.body, aad)
            if packet.end:
                messages.append(bytes(current))
                current.clear()
        out.append(messages)
    return out[0], out[1]


def _is_cleartext(body: bytes) -> bool:
    """A resume request (int 60010 + ad) or answer (an ad of a few attributes)."""
    return body[:8] == (60010).to_bytes(8, "big") or body[8:14] in (b"Nonce ", b"Return")


class Replay:
    """A connection whose peer is a capture: what we send must equal what was sent."""

    def __init__(self, script: list[tuple[str, bytes]]) -> None:
        self.script = list(script)
        self.sent: list[bytes] = []

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
        kind, expected = self.script.pop(0)
        assert kind == "send", f"sent a message where the capture received one: {payload[:40]!r}"
        assert payload == expected
        self.sent.append(payload)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        kind, payload = self.script.pop(0)
        assert kind == "recv", "waited for a message where the capture sent one"
        return payload

    def encoder(self) -> Encoder:
        return Encoder(encrypted=True)

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=True)
