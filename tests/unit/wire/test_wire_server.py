"""execd's DC_AUTHENTICATE server against execd's client, over loopback TCP with real FS
authentication in /tmp: sessions, resumption, SID_NOT_FOUND, authorization, DC_SEC_QUERY,
and bad peers dropped without disturbing other connections. (The real HTCondor client
against this server: tests/pool/test_wire_server_pool.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import socket
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from structlog.testing import capture_logs

from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.classad_codec import decode_ad, encode_ad, to_classad
from execd.wire.collector import open_command
from execd.wire.commands import Command
from execd.wire.security import ClientSecurity, NotAuthorizedError, connect, start_command
from execd.wire.server import CommandServer, Peer, ServerSecurity
from execd.wire.session import Session
from execd.wire.sinful import parse_sinful

ECHO = 60020  # DC_NOP_READ, given an echo handler here
DOMAIN = "test.domain"


async def _echo(channel: Channel, command: int, peer: Peer) -> None:
    dec = channel.decoder(await channel.recv())
    text = dec.get_string()
    dec.finish()
    await channel.send(channel.encoder().put_string(f"{text} from {peer.user}").payload())


@pytest_asyncio.fixture
async def server() -> AsyncIterator[CommandServer]:
    srv = CommandServer({ECHO: _echo}, ServerSecurity(domain=DOMAIN, timeout_s=2))
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def _echo_call(srv: CommandServer, security: ClientSecurity, text: str) -> str:
    channel, _ = await open_command(parse_sinful(srv.address), ECHO, security)
    try:
        await channel.send(channel.encoder().put_string(text).payload())
        dec = channel.decoder(await channel.recv())
        return dec.get_string()
    finally:
        await channel.close()


@pytest.mark.asyncio
async def test_new_session_then_resumed(server: CommandServer) -> None:
    security = ClientSecurity(timeout_s=2)
    me = f"{getpass.getuser()}@{DOMAIN}"
    assert await _echo_call(server, security, "hi") == f"hi from {me}"
    (session,) = security.cache.sessions()
    assert session.user == me and session.auth_method == "FS"
    assert session.valid_commands == {ECHO}
    assert await _echo_call(server, security, "again") == f"again from {me}"
    assert [s.sid for s in security.cache.sessions()] == [session.sid]
    assert len(server.security.sessions) == 1  # the server made one session, not two


@pytest.mark.asyncio
async def test_unknown_session_is_refused_and_the_client_starts_afresh(
    server: CommandServer,
) -> None:
    security = ClientSecurity(timeout_s=2)
    forged = Session(sid="forged", key=bytes(32), connect_addr=server.address, user="x",
                     auth_method="FS", valid_commands=frozenset({ECHO}), remote_version="",
                     expires_at=None)  # fmt: skip
    security.cache.store(forged, ECHO)
    assert (await _echo_call(server, security, "ok")).startswith("ok from ")
    assert "forged" not in [s.sid for s in security.cache.sessions()]


@pytest.mark.asyncio
async def test_denied_command_names_the_identity() -> None:
    srv = CommandServer({ECHO: _echo}, ServerSecurity(domain=DOMAIN, timeout_s=2,
                                                      authorize=lambda _c, _p: False))  # fmt: skip
    await srv.start()
    try:
        with pytest.raises(NotAuthorizedError, match=f"'DENIED'.*{getpass.getuser()}@{DOMAIN}"):
            await _echo_call(srv, ClientSecurity(timeout_s=2), "no")
        assert srv.security.sessions == {}  # a denied peer gets no session to resume
    finally:
        await srv.close()


@pytest.mark.parametrize("allowed", [True, False])
@pytest.mark.asyncio
async def test_sec_query_answers_whether_a_command_is_authorized(allowed: bool) -> None:
    security = ServerSecurity(domain=DOMAIN, timeout_s=2, authorize=lambda _c, _p: allowed)
    srv = CommandServer({ECHO: _echo}, security)
    await srv.start()
    address = parse_sinful(srv.address)
    channel = await connect(address, timeout_s=2)
    try:
        security = ClientSecurity(timeout_s=2)
        if not allowed:  # the post-auth ad already says DENIED, as HTCondor's does
            with pytest.raises(NotAuthorizedError, match="'DENIED'"):
                await start_command(channel, address, Command.DC_SEC_QUERY, security,
                                    auth_command=ECHO)  # fmt: skip
            return
        await start_command(channel, address, Command.DC_SEC_QUERY, security, auth_command=ECHO)
        dec = channel.decoder(await channel.recv())
        assert to_classad(decode_ad(dec))["AuthorizationSucceeded"] is True
    finally:
        await channel.close()
        await srv.close()


@pytest.mark.asyncio
async def test_raw_and_garbage_connections_are_dropped_others_unaffected(
    server: CommandServer,
) -> None:
    address = parse_sinful(server.address)
    security = ClientSecurity(timeout_s=2)
    # a raw command without DC_AUTHENTICATE, garbage, and a peer that stalls mid-packet
    raw = await connect(address, timeout_s=2)
    await raw.send(raw.encoder().put_int(ECHO).put_string("sneaky").payload())
    with pytest.raises(RemoteProtocolError, match="closed the connection"):
        await raw.recv()
    await raw.close()
    with socket.create_connection((address.host, address.port)) as junk:
        junk.sendall(b"\x07garbage that is no packet")
        stalled = socket.create_connection((address.host, address.port))
        stalled.sendall(b"\x01\x00\x00\x01\x00partial")
        try:
            # a good client meanwhile is served at once
            assert (await _echo_call(server, security, "fine")).startswith("fine from ")
        finally:
            stalled.close()
    assert len(server.security.sessions) == 1


@pytest.mark.asyncio
async def test_fs_directory_outside_tmp_is_refused_by_the_client() -> None:
    # A hostile server names a directory elsewhere: execd's client never creates it.
    async def hostile(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ch = Channel(reader, writer, peer="client", timeout_s=2)
        dec = ch.decoder(await ch.recv())
        dec.get_int()
        decode_ad(dec)
        reply = {"Enact": '"YES"', "Encryption": '"YES"', "Authentication": '"YES"',
                 "CryptoMethods": '"AES"', "AuthMethodsList": '"FS"',
                 "ECDHPublicKey": '"BBBB"'}  # fmt: skip
        await ch.send(encode_ad(ch.encoder(), reply).payload())
        await ch.recv()  # method mask
        await ch.send(ch.encoder().put_int(4).payload())
        await ch.send(ch.encoder().put_string("/etc/FS_evil_").payload())
        with contextlib.suppress(RemoteProtocolError):
            await ch.recv()  # the client hangs up instead of answering
        await ch.close()

    srv = await asyncio.start_server(hostile, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        address = parse_sinful(f"<127.0.0.1:{port}>")
        channel = await connect(address, timeout_s=2)
        try:
            with pytest.raises(RemoteProtocolError, match="not an FS_ name directly under /tmp"):
                await start_command(channel, address, ECHO, ClientSecurity(timeout_s=2))
        finally:
            await channel.close()
    finally:
        srv.close()
        await srv.wait_closed()
    assert not [n for n in os.listdir("/etc") if n.startswith("FS_evil")]


@pytest.mark.asyncio
async def test_connections_beyond_the_limit_are_closed_at_once() -> None:
    srv = CommandServer({ECHO: _echo}, ServerSecurity(domain=DOMAIN, timeout_s=5),
                        max_connections=2)  # fmt: skip
    await srv.start()
    address = parse_sinful(srv.address)
    idle = [await asyncio.open_connection(address.host, address.port) for _ in range(2)]
    try:
        with capture_logs() as events:
            reader, writer = await asyncio.open_connection(address.host, address.port)
            assert await asyncio.wait_for(reader.read(), 2) == b""  # closed, not served
            writer.close()
        assert [e["event"] for e in events] == ["wire_connection_refused"]
        assert "already serving 2 connections" in events[0]["reason"]
    finally:
        for _, w in idle:
            w.close()
    # the idle ones hang up; once they are dropped the server serves again
    await asyncio.wait_for(srv.wait_idle(), 5)
    assert (await _echo_call(srv, ClientSecurity(timeout_s=2), "back")).startswith("back from ")
    await srv.close()


@pytest.mark.asyncio
async def test_an_ipv6_peer_is_named_in_brackets() -> None:
    """condor_shared_port passes AF_INET6 connections too: the peer text must keep the
    address apart from the port (2001:db8::5 port 4660 is not 2001:db8::5:4660)."""
    srv = CommandServer({ECHO: _echo}, ServerSecurity(domain=DOMAIN, timeout_s=2))
    listener = socket.socket(socket.AF_INET6)
    listener.bind(("::1", 0))
    listener.listen()
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        with capture_logs() as events:
            client = socket.socket(socket.AF_INET6)
            client.setblocking(False)
            await loop.sock_connect(client, listener.getsockname()[:2])
            accepted, _ = await loop.sock_accept(listener)
            srv.adopt(accepted, "execd")
            await loop.sock_sendall(client, b"\x07garbage that is no packet")
            assert await loop.sock_recv(client, 100) == b""  # dropped
            client.close()
            await asyncio.wait_for(srv.wait_idle(), 5)
        dropped = [e for e in events if e["event"] == "wire_connection_dropped"]
        assert len(dropped) == 1, events
        host, _, port = dropped[0]["peer"].rpartition(":")
        assert host == "[::1]" and port.isdigit(), dropped
    finally:
        listener.close()
        await srv.close()
