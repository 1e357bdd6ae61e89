"""The DC_AUTHENTICATE handshake, server side, and the command listener around it.

Mirrors HTCondor's DaemonCommandProtocol (daemon_command.cpp) for TCP:
- new session: read the client's policy ad, answer ours (Enact = "YES", the methods
  we share, AES, our ECDHPublicKey, TrustDomain and IssuerKeys for IDTOKENS),
  authenticate (method mask, then FS or IDTOKENS), send int 0 (no
  wrapped key), switch to AES-GCM with the ECDH key, send the post-auth ad
  {ReturnCode AUTHORIZED/DENIED, Sid, User, ValidCommands, TriedAuthentication}.
- resumed session (UseSession = "YES"): unknown Sid -> {ReturnCode = "SID_NOT_FOUND"}
  and the connection closes; known -> {ReturnCode = "AUTHORIZED", RemoteVersion,
  Nonce} in clear, then AES-GCM with the session's key.
- DC_SEC_QUERY (condor_ping): after the handshake, {AuthorizationSucceeded} and close.
Then the command's handler gets the encrypted channel and the authenticated peer.
A token's scope (`condor:/READ` ...) limits its holder to the commands of those
authorization levels, checked before the authorization hook, as DaemonCore does.

execd requires authentication and encryption for every command; a peer that sends a
raw command, garbage, or stalls is logged (reason only, never a key or claim id) and
dropped; other connections are unaffected.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import inspect
import itertools
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from execd.errors import ProtocolError, RemoteProtocolError
from execd.log import get_logger
from execd.wire.auth_fs import AuthenticationFailedError, serve_fs
from execd.wire.auth_token import serve_token
from execd.wire.channel import DEFAULT_TIMEOUT_S, Channel
from execd.wire.claim_session import MATCH_SESSION_USER, ClaimSession
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.commands import AUTH_METHOD_BITS, AuthMethod, Command, within_limits
from execd.wire.crypto import EcdhKeyPair
from execd.wire.security import CONDOR_VERSION
from execd.wire.token_issuer import TokenIssuer

log = get_logger("wire")
_sequence = itertools.count()


@dataclass(frozen=True)
class Peer:
    """Who sent a command: the mapped identity (user@domain), method, session, address."""

    user: str
    method: str
    sid: str
    address: str
    limits: frozenset[str] | None = None  # authorization levels a token's scope allows


@dataclass
class _ServerSession:
    key: bytes = field(repr=False)
    peer: Peer
    expires_at: float


Handler = Callable[[Channel, int, Peer], Awaitable[None]]
# May be a coroutine function: the pool's looks up the peer's host names off the loop.
Authorizer = Callable[[int, Peer], bool | Awaitable[bool]]


@dataclass
class ServerSecurity:
    domain: str
    methods: tuple[str, ...] = ("FS",)
    tokens: TokenIssuer | None = None  # IDTOKENS: the pool's trust domain and keys
    session_duration_s: int = 86400
    timeout_s: float = DEFAULT_TIMEOUT_S
    authorize: Authorizer = lambda _cmd, _peer: True
    sessions: dict[str, _ServerSession] = field(default_factory=dict)


    def add_claim_session(self, session: ClaimSession, *, lifetime_s: float = 10 * 365 * 86400,
                          user: str = MATCH_SESSION_USER) -> None:  # fmt: skip
        """Accept resumption of a claim id's session (made when the claim was made)."""
        peer = Peer(user=user, method="MATCH", sid=session.sid, address="(claim)")
        self.sessions[session.sid] = _ServerSession(session.key, peer,
                                                    time.monotonic() + lifetime_s)  # fmt: skip

    def remove_session(self, sid: str) -> None:
        self.sessions.pop(sid, None)


def _wire_name(method: str) -> str:
    """IDTOKENS travels as TOKEN (what a 25.x peer's lists hold)."""
    return "TOKEN" if AUTH_METHOD_BITS[method.upper()] == AuthMethod.TOKEN else method.upper()


def _s(value: Any) -> str:
    return from_values({"V": value})["V"]


class CommandServer:
    """Listens on a TCP port; each connection: one authenticated command, then closed.

    At most `max_connections` are served at once; more are closed at once (and logged),
    so a flood of idle connections costs file descriptors for one deadline, no more.
    """

    def __init__(self, handlers: Mapping[int, Handler], security: ServerSecurity, *,
                 max_connections: int = 256) -> None:  # fmt: skip
        self.handlers = dict(handlers)
        self.security = security
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._server = await asyncio.start_server(self._accept, host, port,
                                                  family=socket.AF_INET)  # fmt: skip

    @property
    def address(self) -> str:
        assert self._server is not None, "start() first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"<{host}:{port}?addrs={host}-{port}&noUDP>"

    def open_connections(self) -> int:
        """Connections accepted and not yet served or dropped."""
        return len(self._tasks)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    async def wait_idle(self) -> None:
        """Until every connection accepted so far has been served or dropped."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def close(self) -> None:
        # Connections first: since Python 3.12 wait_closed() waits for every open
        # connection, and a client awaiting a job's end would hold the shutdown forever.
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def adopt(self, sock: socket.socket, shared_port_id: str) -> None:
        """Serve a connection condor_shared_port passed on to endpoint `shared_port_id`
        (execd.wire.shared_port): its client addressed `...?sock=<shared_port_id>`."""
        async def serve() -> None:
            reader, writer = await asyncio.open_connection(sock=sock)
            self._accept(reader, writer, shared_port_id)

        task = asyncio.get_running_loop().create_task(serve())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                shared_port_id: str | None = None) -> None:  # fmt: skip
        host, port = writer.get_extra_info("peername")[:2]
        # an IPv6 peer (shared port passes AF_INET6 sockets too) in brackets, so that
        # its address cannot be read with the port as one more group
        peer = f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
        if len(self._tasks) >= self.max_connections:
            log.warning("wire_connection_refused", peer=peer,
                        reason=f"already serving {len(self._tasks)} connections")  # fmt: skip
            writer.close()
            return
        channel = Channel(reader, writer, peer=peer, timeout_s=self.security.timeout_s)
        task = asyncio.get_running_loop().create_task(self._serve(channel, shared_port_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, channel: Channel, shared_port_id: str | None = None) -> None:
        try:
            await self._one_command(channel, shared_port_id)
        except (ProtocolError, OSError) as exc:
            log.warning("wire_connection_dropped", peer=channel.peer, reason=str(exc))
        finally:
            await channel.close()

    async def _one_command(self, channel: Channel, shared_port_id: str | None) -> None:
        dec = channel.decoder(await channel.recv())
        first = dec.get_int("command")
        if first != Command.DC_AUTHENTICATE:
            raise RemoteProtocolError(f"unauthenticated command {first} refused")
        ad = to_classad(decode_ad(dec, "client policy ad"))
        dec.finish("DC_AUTHENTICATE message")
        command = ad.get("Command")
        if not isinstance(command, int):
            raise RemoteProtocolError("client policy ad has no integer Command")
        asked = ad.get("AuthCommand") if command == Command.DC_SEC_QUERY else command
        if not isinstance(asked, int):
            raise RemoteProtocolError("DC_SEC_QUERY without an integer AuthCommand")
        if ad.get("UseSession") == "YES":
            # judged (and served) as this connection's peer, not the one that opened
            # the session ("(claim)" for a claim id's), as HTCondor checks the socket's
            peer = dataclasses.replace(await self._resume(channel, ad), address=channel.peer)
            allowed = await self._allowed(asked, peer)
        else:
            peer, allowed = await self._new_session(channel, ad, asked, shared_port_id)
        log.info("wire_command", peer=channel.peer, user=peer.user, method=peer.method,
                 command=asked, authorized=allowed)  # fmt: skip
        if command == Command.DC_SEC_QUERY:
            enc = encode_ad(channel.encoder(), {"AuthorizationSucceeded": _s(allowed)})
            await channel.send(enc.payload())
            return
        if not allowed:
            raise RemoteProtocolError(f"{peer.user} is not authorized for command {asked}")
        await self.handlers[asked](channel, asked, peer)

    async def _allowed(self, command: int, peer: Peer) -> bool:
        if command not in self.handlers:
            return False
        if not within_limits(command, peer.limits):
            log.warning("wire_command_refused", peer=peer.address, user=peer.user,
                        method=peer.method, command=command,
                        why=f"token limited to {','.join(sorted(peer.limits or ()))}")  # fmt: skip
            return False
        verdict = self.security.authorize(command, peer)
        return bool(await verdict) if inspect.isawaitable(verdict) else verdict

    # ----- new session -------------------------------------------------------------
    async def _new_session(self, channel: Channel, ad: Any, asked: int,
                           shared_port_id: str | None) -> tuple[Peer, bool]:  # fmt: skip
        if ad.get("NewSession") != "YES":
            raise RemoteProtocolError("client asked for neither a new nor a cached session")
        theirs = {AUTH_METHOD_BITS.get(m.strip().upper())
                  for m in str(ad.get("AuthMethods", "")).split(",")}  # fmt: skip
        shared = [m for m in self.security.methods if AUTH_METHOD_BITS[m.upper()] in theirs]
        crypto = {m.strip().upper() for m in str(ad.get("CryptoMethods", "")).split(",")}
        client_key = ad.get("ECDHPublicKey")
        if not shared or "AES" not in crypto or not isinstance(client_key, str):
            raise RemoteProtocolError(
                f"client offers methods {ad.get('AuthMethods')!r} and crypto {sorted(crypto)}; "
                "execd "
                f"requires one of {list(self.security.methods)}, AES and an ECDH key"
            )
        keypair = EcdhKeyPair()
        names = [_wire_name(m) for m in shared]
        tokens = self.security.tokens
        reply: WireAd = from_values({
            "Enact": "YES", "Integrity": "YES", "Encryption": "YES", "Authentication": "YES",
            "AuthMethods": names[0], "AuthMethodsList": ",".join(names),
            "TrustDomain": tokens.trust_domain if tokens else self.security.domain,
            "SessionLease": 3600,
            "CryptoMethods": "AES", "CryptoMethodsList": "AES",
            "ECDHPublicKey": keypair.public_b64(), "RemoteVersion": CONDOR_VERSION,
            "SessionDuration": str(self.security.session_duration_s), "NegotiatedSession": True,
        })  # fmt: skip
        if tokens is not None and (keys := tokens.key_names()):
            reply |= from_values({"IssuerKeys": ", ".join(keys)})
        await channel.send(encode_ad(channel.encoder(), reply).payload())

        user, method, limits = await self._authenticate(channel, shared, shared_port_id)
        await channel.send(channel.encoder().put_int(0).payload())  # no wrapped key
        key = keypair.session_key(client_key)
        channel.enable_crypto(key)
        sid = f"{socket.gethostname()}:{os.getpid()}:{int(time.time())}:{next(_sequence)}"
        peer = Peer(user=user, method=method, sid=sid, address=channel.peer, limits=limits)
        allowed = await self._allowed(asked, peer)
        post = from_values({
            "ReturnCode": "AUTHORIZED" if allowed else "DENIED", "Sid": sid, "User": user,
            "ValidCommands": ",".join(str(c) for c in sorted(self.handlers)),
            "TriedAuthentication": True,
        })  # fmt: skip
        await channel.send(encode_ad(channel.encoder(), post).payload())
        if allowed:
            expires = time.monotonic() + self.security.session_duration_s
            self.security.sessions[sid] = _ServerSession(key, peer, expires)
        return peer, allowed

    async def _authenticate(self, channel: Channel, shared: list[str], shared_port_id: str | None
                            ) -> tuple[str, str, frozenset[str] | None]:  # fmt: skip
        dec = channel.decoder(await channel.recv())
        mask = dec.get_int("client method mask")
        dec.finish("method mask message")
        chosen = next((m for m in shared if mask & AUTH_METHOD_BITS[m.upper()]), None)
        bit = AUTH_METHOD_BITS[chosen.upper()] if chosen else 0
        await channel.send(channel.encoder().put_int(bit).payload())
        if bit == AuthMethod.FS:
            name = await serve_fs(channel, shared_port_id=shared_port_id)
            return f"{name}@{self.security.domain}", "FS", None
        if bit == AuthMethod.TOKEN and self.security.tokens is not None:
            claims = await serve_token(channel, self.security.tokens)
            return claims.subject, "IDTOKENS", claims.limits
        raise AuthenticationFailedError(
            f"{channel.peer} offered method mask {mask}; execd accepts {shared}"
        )

    # ----- resumed session ----------------------------------------------------------
    async def _resume(self, channel: Channel, ad: Any) -> Peer:
        sid = ad.get("Sid")
        session = self.security.sessions.get(sid) if isinstance(sid, str) else None
        if session is not None and session.expires_at <= time.monotonic():
            del self.security.sessions[session.peer.sid]
            session = None
        if session is None:
            if ad.get("ResumeResponse") is True:
                reply = from_values({"ReturnCode": "SID_NOT_FOUND"})
                await channel.send(encode_ad(channel.encoder(), reply).payload())
            raise RemoteProtocolError("resume of an unknown or expired session refused")
        if ad.get("ResumeResponse") is True:
            nonce = base64.b64encode(os.urandom(33)).decode("ascii")
            reply = from_values({"ReturnCode": "AUTHORIZED", "RemoteVersion": CONDOR_VERSION,
                                 "Nonce": nonce})  # fmt: skip
            await channel.send(encode_ad(channel.encoder(), reply).payload())
        channel.enable_crypto(session.key)
        return session.peer
