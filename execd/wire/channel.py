"""One CEDAR connection over asyncio streams: messages in and out, plain or AES-GCM.

Until encryption is on, every header and body sent and received is hashed (SHA-256,
one digest per direction); the first encrypted packet in each direction carries both
digests in its AAD (crypto.py). The shared-port request is not part of that handshake:
`reset_digests()` after sending it, as HTCondor's SharedPortClient does.

Every wait has a deadline: a peer that stops mid-message or never answers costs one
RemoteProtocolError naming the peer, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

from execd.errors import RemoteProtocolError
from execd.wire.crypto import PacketOpener, PacketSealer
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import (
    HEADER_SIZE,
    MAX_MESSAGE_BYTES,
    SEND_PACKET_BYTES,
    chunk_payload,
    encode_header,
    parse_header,
)

DEFAULT_TIMEOUT_S = 20.0


class Channel:
    """A connected CEDAR stream. Not safe for concurrent senders or receivers."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.peer = peer
        self.timeout_s = timeout_s
        self._sent_md: hashlib._Hash | None = hashlib.sha256()
        self._recv_md: hashlib._Hash | None = hashlib.sha256()
        self._sent_bytes = self._recv_bytes = 0
        self._handshake_digests: tuple[bytes, bytes] | None = None
        self._sealer: PacketSealer | None = None
        self._opener: PacketOpener | None = None
        self._first_send = True
        self._first_recv = True
        self._key: bytes | None = None

    @classmethod
    async def connect(
        cls, host: str, port: int, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Channel:
        peer = f"{host}:{port}"
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port), timeout_s
            )
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or "timed out"
            raise RemoteProtocolError(f"cannot connect to {peer}: {reason}") from None
        return cls(reader, writer, peer=peer, timeout_s=timeout_s)

    # ----- state -------------------------------------------------------------------
    @property
    def encrypted(self) -> bool:
        return self._sealer is not None

    @property
    def handshake_digests(self) -> tuple[bytes, bytes] | None:
        """(SHA256 of all sent, of all received) before encryption; None until then."""
        return self._handshake_digests

    @property
    def session_key(self) -> bytes | None:
        return self._key

    def encoder(self) -> Encoder:
        return Encoder(encrypted=self.encrypted)

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload, encrypted=self.encrypted)

    def reset_digests(self) -> None:
        """Forget what was hashed so far (after the shared-port request)."""
        self._sent_md = hashlib.sha256()
        self._recv_md = hashlib.sha256()
        self._sent_bytes = self._recv_bytes = 0

    def enable_crypto(self, key: bytes) -> None:
        """Encrypt everything from now on, both ways, with this AES-256-GCM key.

        A direction in which nothing was sent yet contributes 32 zero bytes, not the
        SHA-256 of nothing: HTCondor creates a digest only with the first packet (a
        schedd resuming a claim session without asking for an answer receives nothing).
        """
        sent = self._sent_md.digest() if self._sent_md and self._sent_bytes else bytes(32)
        received = self._recv_md.digest() if self._recv_md and self._recv_bytes else bytes(32)
        self._handshake_digests = (sent, received)
        self._sent_md = self._recv_md = None
        self._key = key
        self._sealer = PacketSealer(key)
        self._opener = PacketOpener(key)

    def crypto_position(self) -> tuple[bytes, bytes, int, bytes, int] | None:
        """(key, our base IV, packets sent, the peer's base IV, packets received): what
        another process needs to go on with this encrypted connection once both sides
        have sent their first packet; None before that."""
        if self._key is None or self._sealer is None or self._opener is None \
                or self._first_send or self._first_recv:  # fmt: skip
            return None
        send_iv, sent = self._sealer.position
        recv_iv, received = self._opener.position
        if recv_iv is None:
            return None
        return self._key, send_iv, sent, recv_iv, received

    def resume_crypto(self, key: bytes, send_iv: bytes, sent: int, recv_iv: bytes,
                      received: int) -> None:  # fmt: skip
        """Go on with an encrypted connection another process began (crypto_position)."""
        self._sent_md = self._recv_md = None
        self._handshake_digests = (bytes(32), bytes(32))  # used by first packets only
        self._key = key
        self._sealer = PacketSealer.resumed(key, send_iv, sent)
        self._opener = PacketOpener.resumed(key, recv_iv, received)
        self._first_send = self._first_recv = False

    # ----- sending -----------------------------------------------------------------
    async def send(self, payload: bytes, *, end: bool = True,
                   timeout_s: float | None = None) -> None:  # fmt: skip
        """Send one whole message; with `end` false, packets of a message that goes on
        (the last of them sent with `end` true): a long message need not be held whole.
        `timeout_s` (the channel's by default) bounds a stall, as the socket's timeout
        bounds condor's writes (the syscall socket's is STARTER_UPLOAD_TIMEOUT)."""
        self.writer.write(self._frame(payload, end))
        try:
            await self._drain(self.timeout_s if timeout_s is None else timeout_s)
        except (OSError, TimeoutError) as exc:
            # Half a message went: the connection is done. Dropped, as condor drops it: a
            # graceful close would hold the unsent bytes and the socket until the peer reads.
            self.writer.transport.abort()
            reason = str(exc) or "timed out"
            raise RemoteProtocolError(f"sending to {self.peer} failed: {reason}") from None

    async def _drain(self, limit: float) -> None:
        """Wait until the transport's buffer is low again; TimeoutError only when it did
        not shrink for `limit` s (condor's timeout is a stall bound, not a bound on the
        whole message: a 32 MiB Chirp putfile on a slow link that moves goes on)."""
        transport = self.writer.transport
        clock = asyncio.get_running_loop().time
        drain = asyncio.ensure_future(self.writer.drain())
        try:
            left, moved = transport.get_write_buffer_size(), clock()
            while True:  # looked at 4 times a bound: fails within 1.25 bounds of a stall
                done, _ = await asyncio.wait({drain}, timeout=limit / 4)
                if done:
                    return drain.result()
                if (now := transport.get_write_buffer_size()) < left:
                    left, moved = now, clock()
                elif clock() - moved >= limit:
                    raise TimeoutError()
        finally:
            drain.cancel()  # no-op once done; a cancelled task is never "not retrieved"

    def _frame(self, payload: bytes, last: bool = True) -> bytes:
        out = bytearray()
        for final, chunk in chunk_payload(payload, SEND_PACKET_BYTES):
            end = final and last
            if self._sealer is None:
                header = encode_header(end, len(chunk))
                if self._sent_md is not None:
                    self._sent_md.update(header + chunk)
                    self._sent_bytes += len(header) + len(chunk)
                out += header + chunk
                continue
            header = encode_header(end, self._sealer.body_length(len(chunk)))
            aad = header
            if self._first_send:
                assert self._handshake_digests is not None
                sent, received = self._handshake_digests
                aad = sent + received + header
                self._first_send = False
            out += header + self._sealer.seal(chunk, aad)
        return bytes(out)

    # ----- receiving ---------------------------------------------------------------
    async def recv(self, timeout_s: float | None = None) -> bytes:
        """Receive one whole message (all its packets)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            return await asyncio.wait_for(self._recv_message(), limit)
        except TimeoutError:
            raise RemoteProtocolError(
                f"{self.peer} sent no whole message within {limit} s"
            ) from None

    async def _recv_message(self) -> bytes:
        message = bytearray()
        while True:
            header = await self._read_exactly(HEADER_SIZE, "a packet header")
            end, length = parse_header(header)
            body = await self._read_exactly(length, f"a packet body of {length} bytes")
            if self._opener is None:
                if self._recv_md is not None:
                    self._recv_md.update(header + body)
                    self._recv_bytes += len(header) + len(body)
            else:
                aad = header
                if self._first_recv:
                    assert self._handshake_digests is not None
                    sent, received = self._handshake_digests
                    aad = received + sent + header
                    self._first_recv = False
                body = self._opener.open(body, aad)
            message += body
            if len(message) > MAX_MESSAGE_BYTES:
                raise RemoteProtocolError(
                    f"message from {self.peer} over the {MAX_MESSAGE_BYTES}-byte limit"
                )
            if end:
                return bytes(message)

    async def _read_exactly(self, n: int, what: str) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError as exc:
            raise RemoteProtocolError(
                f"{self.peer} closed the connection inside {what} "
                f"({len(exc.partial)} of {n} bytes)"
            ) from None
        except OSError as exc:
            raise RemoteProtocolError(f"reading {what} from {self.peer} failed: {exc}") from None

    # ----- closing -----------------------------------------------------------------
    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError, TimeoutError):
            await asyncio.wait_for(self.writer.wait_closed(), self.timeout_s)

    @property
    def local_address(self) -> tuple[str, int]:
        host, port = self.writer.get_extra_info("sockname")[:2]
        return str(host), int(port)

    @property
    def peer_address(self) -> tuple[str, int]:
        host, port = self.writer.get_extra_info("peername")[:2]
        return str(host), int(port)
