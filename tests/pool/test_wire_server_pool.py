"""The real HTCondor client against execd's DC_AUTHENTICATE server: condor_ping in the
pool's chroot negotiates FS + ECDH + AES-GCM with execd's CommandServer on the host.

condor_ping sends DC_SEC_QUERY with AuthCommand = the level's command (60020 READ,
60026 DAEMON); execd answers after the whole handshake whether it would authorize it.
"""

from __future__ import annotations

import asyncio
import pwd

import pool_harness as harness

from execd.wire.channel import Channel
from execd.wire.server import CommandServer, Peer, ServerSecurity

READ, DAEMON = 60020, 60026


async def _nop(channel: Channel, command: int, peer: Peer) -> None:
    """condor_ping never reaches a handler (DC_SEC_QUERY stops before it)."""


def _condor_identity(pool: harness.Pool) -> str:
    """condor_ping as root authenticates as the chroot's condor uid; FS names that uid
    by the host's passwd (execd's), where it may be another user."""
    for line in pool.host_path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "condor":
            return pwd.getpwuid(int(fields[2])).pw_name
    raise AssertionError("no condor user in the chroot")


def test_condor_ping_authenticates_to_execds_server(pool: harness.Pool) -> None:
    seen: list[tuple[int, str]] = []

    def authorize(command: int, peer: Peer) -> bool:
        seen.append((command, peer.user))
        return command == READ

    async def ping_both() -> tuple[str, harness.Tool, harness.Tool, int]:
        security = ServerSecurity(domain="execd.test", timeout_s=10, authorize=authorize)
        server = CommandServer({READ: _nop, DAEMON: _nop}, security)
        await server.start()
        try:
            read = await asyncio.to_thread(pool.tool, "condor_ping", "-addr", server.address,
                                           "-verbose", "READ")  # fmt: skip
            daemon = await asyncio.to_thread(pool.tool, "condor_ping", "-addr", server.address,
                                             "-verbose", "DAEMON")  # fmt: skip
            return server.address, read, daemon, len(security.sessions)
        finally:
            await server.close()

    address, read, daemon, sessions = asyncio.run(ping_both())
    user = f"{_condor_identity(pool)}@execd.test"
    assert read.returncode == 0, read.stderr
    for expected in ("Authorized:                  TRUE", "Authenticated using:         FS",
                     "Encryption:                  AES", f"Remote Mapping:              {user}",
                     "Remote Version:              $CondorVersion: 25.0.0"):  # fmt: skip
        assert expected in read.stdout, read.stdout
    assert daemon.returncode != 0
    assert f'Received "DENIED" from server for user {user} using method FS' in (
        daemon.stdout + daemon.stderr
    )
    assert seen == [(READ, user), (DAEMON, user)]
    assert sessions == 1  # only the authorized READ session is kept for resumption
    assert address.startswith("<127.0.0.1:")
