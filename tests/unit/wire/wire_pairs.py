"""Two connected Channels over a real socketpair (no network, no mocks)."""

from __future__ import annotations

import asyncio
import socket

from execd.wire.channel import Channel
from execd.wire.encoding import Decoder, Encoder


async def channel_pair(timeout_s: float = 5.0) -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    ra, wa = await asyncio.open_connection(sock=a)
    rb, wb = await asyncio.open_connection(sock=b)
    return (Channel(ra, wa, peer="a", timeout_s=timeout_s),
            Channel(rb, wb, peer="b", timeout_s=timeout_s))  # fmt: skip


async def raw_pair(timeout_s: float = 5.0) -> tuple[Channel, asyncio.StreamWriter]:
    """A Channel and the raw writer of its peer: to feed it any bytes at all."""
    a, b = socket.socketpair()
    ra, wa = await asyncio.open_connection(sock=a)
    _, wb = await asyncio.open_connection(sock=b)
    return Channel(ra, wa, peer="raw peer", timeout_s=timeout_s), wb


class ScriptedPeer:
    """The other end of an encrypted message channel, scripted: records each message it
    is sent and answers from a list (one answer per message expected back)."""

    def __init__(self, answers: list[bytes] | None = None) -> None:
        self.answers = list(answers or [])
        self.sent: list[bytes] = []

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
        self.sent.append(payload)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        return self.answers.pop(0)

    def encoder(self) -> Encoder:
        return Encoder(encrypted=True)

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=True)
