"""The control socket: a Unix stream socket speaking newline-delimited JSON.

Each request is one line, a JSON object ``{"id": any, "verb": str, "args": object}``;
each reply is one line ``{"id": ..., "ok": true, "result": ...}`` or
``{"id": ..., "ok": false, "error": {"code": str, "message": str}}``. The protocol is
documented in docs/protocol.md.

Callers are identified by SO_PEERCRED (uid, gid, pid), never by what they say. Each
verb requires a role: ``read`` (everyone), ``admin`` (root and EXECD_ADMIN_GROUP) or
``scheduler`` (root and EXECD_SCHEDULER_USERS). A malformed, oversized or unauthorized
request gets an error reply and changes nothing; one client never blocks another.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import grp
import json
import os
import pwd
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execd.log import get_logger

MAX_FRAME = 1 << 20  # bytes in one request line

log = get_logger("control")


class Role(enum.Enum):
    READ = "read"
    ADMIN = "admin"
    SCHEDULER = "scheduler"


class ControlError(Exception):
    """An error reply: a stable code a script can test, and a message for a person."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int
    roles: frozenset[Role]

    @property
    def user(self) -> str:
        try:
            return pwd.getpwuid(self.uid).pw_name
        except KeyError:
            return str(self.uid)


@dataclass(frozen=True)
class Request:
    id: Any
    verb: str
    args: dict[str, Any]
    peer: Peer


Handler = Callable[[Request], Awaitable[Any]]


@dataclass(frozen=True)
class Verb:
    handler: Handler
    role: Role
    doc: str


@dataclass
class Authorizer:
    """Maps a peer's credentials to roles."""

    admin_group: str | None = None
    scheduler_users: frozenset[str] = field(default_factory=frozenset)

    def roles(self, uid: int, gid: int) -> frozenset[Role]:
        roles = {Role.READ}
        if uid == 0 or uid == os.geteuid():
            # root, and the user execd itself runs as (a personal, non-root execd)
            return frozenset(Role)
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = None
        if self.admin_group and self._in_group(uid, gid, name, self.admin_group):
            roles.add(Role.ADMIN)
        if name is not None and name in self.scheduler_users:
            roles.add(Role.SCHEDULER)
        return frozenset(roles)

    @staticmethod
    def _in_group(uid: int, gid: int, name: str | None, group: str) -> bool:
        try:
            entry = grp.getgrnam(group)
        except KeyError:
            return False
        return gid == entry.gr_gid or (name is not None and name in entry.gr_mem)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return pid, uid, gid


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), default=str).encode() + b"\n"


def error_reply(request_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}


def parse_request(line: bytes) -> tuple[Any, str, dict[str, Any]]:
    """Validate one request line; raises ControlError naming what is wrong."""
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ControlError("bad_request", f"request is not valid JSON: {exc}") from None
    if not isinstance(message, dict):
        raise ControlError("bad_request", "request must be a JSON object")
    verb = message.get("verb")
    if not isinstance(verb, str) or not verb:
        raise ControlError("bad_request", "request needs a 'verb' string")
    args = message.get("args", {})
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ControlError("bad_request", "'args' must be a JSON object")
    return message.get("id"), verb, args


class ControlServer:
    """Serves the verbs given to it on a Unix socket."""

    def __init__(self, path: Path, verbs: dict[str, Verb], authorizer: Authorizer) -> None:
        self.path = path
        self.verbs = verbs
        self.authorizer = authorizer
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self, mode: int = 0o666) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._server = await asyncio.start_unix_server(
            self._serve_client, path=str(self.path), limit=MAX_FRAME + 1
        )
        # Everyone may connect; what they may do is decided per verb from SO_PEERCRED.
        os.chmod(self.path, mode)

    async def close(self) -> None:
        # Connections first: since Python 3.12 wait_closed() waits for every open
        # connection, and a client awaiting a job's end would hold the shutdown forever.
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        for task in list(self._clients):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:  # owned by the server: cancelled and awaited on close
            self._clients.add(task)
            task.add_done_callback(self._clients.discard)
        sock = writer.get_extra_info("socket")
        pid, uid, gid = peer_credentials(sock)
        peer = Peer(pid, uid, gid, self.authorizer.roles(uid, gid))
        try:
            while True:
                try:
                    line = await reader.readuntil(b"\n")
                except asyncio.IncompleteReadError:
                    return  # the client went away (a partial last line is dropped)
                except asyncio.LimitOverrunError:
                    too_large = error_reply(None, "too_large", f"request over {MAX_FRAME} bytes")
                    writer.write(encode(too_large))
                    await writer.drain()
                    return  # the rest of the frame cannot be re-synchronised: close
                reply = await self._dispatch(line, peer)
                writer.write(encode(reply))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _dispatch(self, line: bytes, peer: Peer) -> dict[str, Any]:
        request_id: Any = None
        try:
            request_id, verb_name, args = parse_request(line)
            verb = self.verbs.get(verb_name)
            if verb is None:
                known = ", ".join(sorted(self.verbs))
                raise ControlError("unknown_verb", f"unknown verb {verb_name!r} (known: {known})")
            if verb.role not in peer.roles:
                log.warning(
                    "control_refused", verb=verb_name, uid=peer.uid, pid=peer.pid,
                    needs=verb.role.value,
                )
                raise ControlError(
                    "permission_denied",
                    f"{verb_name} needs the {verb.role.value} role; user {peer.user} lacks it",
                )
            result = await verb.handler(Request(request_id, verb_name, args, peer))
        except ControlError as exc:
            return error_reply(request_id, exc.code, exc.message)
        except Exception as exc:  # a handler bug must not take the daemon down
            log.exception("control_handler_failed", error=str(exc))
            return error_reply(request_id, "internal", f"internal error: {exc}")
        return {"id": request_id, "ok": True, "result": result}


def describe(verbs: Iterable[tuple[str, Verb]]) -> list[dict[str, str]]:
    return [{"verb": name, "role": v.role.value, "doc": v.doc} for name, v in sorted(verbs)]
