"""Handing a live, encrypted CEDAR connection to this process's next image.

A restart in place re-executes the same process (same pid). A descriptor without
close-on-exec survives the exec, so a connection can outlive it: the peer sees nothing
as long as the new image goes on where the old one stopped. The old image exports
the connection between two messages (`export_connection`: a duplicate of the socket,
made inheritable, and the AES-GCM position of both directions); the new image
adopts it (`adopt_connection`) and the next message is sealed and opened as if one
process had sent them all. `hand_over` decides what a cancelled job conversation hands over:
its shadow connection (only between messages), Chirp proxy, streamed output and the
latest shadow's file transfer endpoint (a reconnect's).

An exported record is a secret (it holds the session key): it lives in the state
store (root's, 0600) and never in the log. It names the pid and the socket's inode,
so that after anything but an exec of the same process (a crash, a reboot) no
unrelated descriptor that happens to have the same number is ever taken for it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import stat
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from execd.log import get_logger
from execd.wire.channel import Channel

if TYPE_CHECKING:
    from execd.wire.chirp_proxy import ChirpProxy
    from execd.wire.shadow import ShadowOptions
    from execd.wire.shadow_link import ShadowLink
    from execd.wire.shadow_syscalls import ShadowSyscalls
    from execd.wire.streamed_output import StreamedOutput

log = get_logger("wire")


def export_connection(channel: Channel) -> dict[str, Any] | None:
    """Make `channel`'s connection survive an exec; what the next image needs to go on
    with it, or None if it cannot (not encrypted yet, or closing). Call it only between
    two messages (nothing half sent, nothing unread)."""
    position = channel.crypto_position()
    sock = channel.writer.get_extra_info("socket")
    if position is None or sock is None or channel.writer.is_closing():
        return None
    key, send_iv, sent, recv_iv, received = position
    fd = os.dup(sock.fileno())
    os.set_inheritable(fd, True)
    b64 = base64.b64encode
    return {"pid": os.getpid(), "fd": fd, "inode": os.fstat(fd).st_ino, "peer": channel.peer,
            "key": b64(key).decode(), "send_iv": b64(send_iv).decode(), "sent": sent,
            "recv_iv": b64(recv_iv).decode(), "received": received}  # fmt: skip


def inherited_fd(record: dict[str, Any],
                 is_kind: Callable[[int], bool] = stat.S_ISSOCK) -> int | None:  # fmt: skip
    """The record's descriptor if this process inherited it through its own exec (a
    socket, or what `is_kind` says of its mode, e.g. stat.S_ISFIFO)."""
    fd = record.get("fd")
    if record.get("pid") != os.getpid() or not isinstance(fd, int):
        return None
    try:
        info = os.fstat(fd)
    except OSError:
        return None
    if not is_kind(info.st_mode) or info.st_ino != record.get("inode"):
        return None
    return fd


def release_connection(record: dict[str, Any]) -> None:
    """An inherited connection nobody goes on with: closed (the peer sees it end)."""
    fd = inherited_fd(record)
    if fd is not None:
        os.close(fd)


async def adopt_connection(record: dict[str, Any], *, timeout_s: float) -> Channel | None:
    """The connection `record` describes, as a Channel that goes on where the old image
    stopped; None if this process did not inherit it (it was not an exec) or the record
    is unusable (logged)."""
    fd = inherited_fd(record)
    if fd is None:
        return None
    try:
        key, send_iv, recv_iv = (base64.b64decode(record[name], validate=True)
                                 for name in ("key", "send_iv", "recv_iv"))  # fmt: skip
        sent, received = int(record["sent"]), int(record["received"])
        sock = socket.socket(fileno=fd)
    except (KeyError, ValueError, TypeError, OSError) as exc:
        log.error("connection_not_adopted", peer=record.get("peer"), error=str(exc))
        with contextlib.suppress(OSError):
            os.close(fd)
        return None
    sock.set_inheritable(False)
    reader, writer = await asyncio.open_connection(sock=sock)
    channel = Channel(reader, writer, peer=str(record.get("peer", "")), timeout_s=timeout_s)
    channel.resume_crypto(key, send_iv, sent, recv_iv, received)
    return channel


def hand_over(calls: ShadowSyscalls, link: ShadowLink, options: ShadowOptions,
              proxy: ChirpProxy | None, streams: StreamedOutput) -> bool:  # fmt: skip
    """The conversation was cancelled: does the daemon's next image go on with it (and
    with its Chirp proxy's listening socket, its streamed output's FIFOs, and the
    transfer socket and key a reconnect brought, which the job ad does not have)?"""
    if options.handover is None:
        return False
    # Idle: no call under way, queued on the lock, or cut off with its answer pending
    # (the next image would read that answer as its own first call's).
    channel = calls.channel if calls.idle and not link.disconnected.is_set() else None
    # A reconnect not taken yet goes, not the old connection (the next image asks the
    # new shadow's sessions first, as adopt_reconnect would have).
    if calls.idle and (fresh := link.take_offered()) is not None:
        channel = calls.channel = fresh
    if channel is not None:
        calls.retire()  # a call queued meanwhile (a stream's, shielded) must not send on it
    calls.turns.reopen()  # the calls held back by the quiesce go on (or fail, if retired)
    return options.handover(channel, proxy, streams.export(), link.transfer)
