"""The starter's Chirp I/O proxy: `condor_chirp` from inside a pool job.

As condor_starter (io_proxy.cpp, io_proxy_handler.cpp, jic_shadow.cpp initIOProxy),
execd listens for each pool job on the loopback (127.0.0.1, a port the kernel picks)
and writes `<address> <port> <cookie>` into the sandbox's `.chirp.config`
(chirp_address.py: mode 0600, the job's user's; the job finds it through
`_CONDOR_CHIRP_CONFIG`). A client must first send `cookie <cookie>`, within
COOKIE_WAIT_S of connecting; anything else is answered -1 (not authenticated) a second
later, as condor_starter sleeps after a wrong cookie, and ends the connection
(condor_starter keeps it). The cookie is never logged. Then
one text line per request (Chirp's protocol, condor_chirp/PROTOCOL), answered with a
number line: >= 0 success, < 0 a Chirp error.

Served, when updates are granted (chirp_config.py: the job ad's `WantRemoteUpdates`,
else `WantIOProxy`, and the ENABLE_CHIRP* knobs), by the shadow's remote system calls
on the conversation's connection (shadow_syscalls.py): `set_job_attr NAME EXPR`,
`get_job_attr NAME` (the length, then the expression's text), `ulog TEXT` (a generic
event, 008, in the user log; the text cut to 1023 bytes as GenericEvent cuts it) and
`version` (2). The shadow decides what may be set (PROTECTED_JOB_ATTRS, IMMUTABLE ...:
EACCES, answered -2). Every other request, and these without the job ad's say-so, is
answered -8 (invalid request), as condor_starter answers a request it does not serve;
the shadow's file calls on paths (getfile, putfile, unlink, getdir, stat, chmod, ...)
are served when file I/O is granted (WantIOProxy and ENABLE_CHIRP_IO; chirp_files.py);
open, close, lseek, read, write, pread, pwrite, sread, swrite, fstat, fstatfs, fchown,
fchmod, ftruncate and fsync on its descriptors too, and lookup, whoami and whoareyou;
`constrain` (an update) is passed on. The delayed updates
(set_job_attr_delayed, get_job_attr_delayed) are served to every job unless its ad
says `WantDelayedUpdates = false` or ENABLE_CHIRP_DELAYED is false (chirp_delayed.py).

Requests are read as condor_starter reads them (chirp_protocol.py: its order, its
prefix matching, words with backslash escapes, extra words ignored). A line longer than
5120 bytes is answered -5 (too big) and its connection closed; one that is not UTF-8
or holds a NUL is answered -8. At most MAX_CONNECTIONS authenticated clients per job
at once, and MAX_STRANGERS connections that have not shown the cookie: a new one makes
the oldest of those go, so that strangers on the node cannot lock the job out.
Refusals of strangers are logged at most once a minute.

A restart in place hands the listening socket over to the next image (with the cookie,
through the state store, as the shadow's connection is): the port is never free in
between and nothing is read back from the sandbox, which the job owns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Protocol

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire import chirp_files
from execd.wire.chirp_address import ChirpAddress, new_cookie
from execd.wire.chirp_budget import BufferHold, ByteBudget
from execd.wire.chirp_config import CHIRP_DEFAULTS, ChirpConfig, ChirpGrants, job_grants
from execd.wire.chirp_delayed import DelayedUpdates
from execd.wire.chirp_files import FileShadow
from execd.wire.chirp_protocol import (
    ATTR_NAME,
    CHIRP_VERSION,
    DELAYED,
    DOESNT_EXIST,
    FILES,
    INVALID_REQUEST,
    LINE_MAX,
    NOT_AUTHENTICATED,
    OFFLINE,
    TOO_BIG,
    UPDATES,
    as_sent,
    chirp_error,
    read_request,
)
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.shadow_syscalls import SyscallError

log = get_logger("wire")

INFO_MAX = 1023  # GenericEvent's info[1024]
MAX_CONNECTIONS = 16  # authenticated clients at once
MAX_STRANGERS = 16  # connections that have not shown the cookie yet
WRONG_COOKIE_DELAY_S = 1.0
COOKIE_WAIT_S = 10.0  # from the connection to its cookie
WARN_INTERVAL_S = 60.0  # strangers' refusals are logged at most this often
CALL_TIMEOUT_S = 20.0
ULOG_GENERIC = 8
NO_GRANTS = ChirpGrants(io=False, updates=False, delayed=False)


class ChirpShadow(FileShadow, Protocol):
    """What the proxy asks of the shadow (ShadowFileCalls has it)."""

    update_extra: Callable[[], WireAd] | None

    async def get_job_attr(self, name: str) -> str: ...
    async def set_job_attr(self, name: str, expr: str) -> None: ...
    async def ulog(self, ad: Mapping[str, str]) -> None: ...


def generic_event(job: Mapping[str, object], text: str) -> WireAd:
    """The GenericEvent (008) condor_starter sends for `ulog`: its Info cut to 1023 bytes."""
    info = text.encode()[:INFO_MAX].decode(errors="ignore")
    return from_values({
        "MyType": "GenericEvent", "EventTypeNumber": ULOG_GENERIC,
        "Cluster": job.get("ClusterId", 0), "Proc": job.get("ProcId", 0), "Subproc": 0,
        "Info": info,
    })  # fmt: skip


class ChirpProxy:
    """One job's Chirp server: listen(), then write_config() into its sandbox; close()."""

    def __init__(self, shadow: ChirpShadow, job: Mapping[str, object], *,
                 global_job_id: str, cookie: str | None = None,
                 connected: Callable[[], bool] = lambda: True,
                 job_wire: Mapping[str, str] | None = None,
                 config: ChirpConfig = CHIRP_DEFAULTS) -> None:  # fmt: skip
        self.shadow = shadow
        self.config = config  # as the job started: kept through a restart in place
        grants = job_grants(job, config) or NO_GRANTS
        # Delayed updates ride on the conversation's updates to the shadow.
        self.delayed = DelayedUpdates(job_wire or {}, prefixes=config.prefixes,
                                      max_attrs=config.max_attrs) if grants.delayed else None
        if self.delayed is not None:
            shadow.update_extra = self.delayed.take
        # False while the shadow is away: calls are answered "offline" at once, as
        # condor_starter answers them (ETIMEDOUT) when its syscall socket is down.
        self.connected = connected
        self._calls: set[asyncio.Task[bytes]] = set()
        self._buffers = ByteBudget(chirp_files.FILE_MAX)  # the job's bytes in flight
        self.job = job
        self.global_job_id = global_job_id
        self.updates = grants.updates
        self.files = grants.io  # the shadow's files (chirp_files.py)
        self._cookie = cookie or new_cookie()
        self._server: asyncio.Server | None = None
        self._closed = False
        self._connections: set[asyncio.Task[None]] = set()  # every one open
        self._strangers: dict[asyncio.Task[None], None] = {}  # no cookie yet, oldest first
        self._clients: set[asyncio.Task[None]] = set()  # authenticated
        self._warned_at: float | None = None
        self._unwarned = 0
        self.address: ChirpAddress | None = None
        self.config_path: Path | None = None

    async def listen(self, host: str = "127.0.0.1", port: int = 0, *,
                     sock: socket.socket | None = None) -> ChirpAddress:
        """On the loopback, a port the kernel picks (or on `sock`, a listening socket
        handed over through a restart). OSError if that fails."""
        if sock is not None:
            self._server = await asyncio.start_server(self._accept, sock=sock,
                                                      limit=LINE_MAX + 2)  # fmt: skip
        else:
            self._server = await asyncio.start_server(self._accept, host, port,
                                                      limit=LINE_MAX + 2)  # fmt: skip
        bound = self._server.sockets[0].getsockname()
        self.address = ChirpAddress(str(bound[0]), int(bound[1]), self._cookie)
        log.info("chirp_proxy_listening", job=self.global_job_id,
                 address=f"{bound[0]}:{bound[1]}", updates=self.updates)  # fmt: skip
        return self.address

    def write_config(self, sandbox: Path, uid: int, gid: int) -> Path:
        """`.chirp.config` in the sandbox, readable by the job's user only."""
        assert self.address is not None, "listen() first"
        self.config_path = self.address.write(sandbox, uid, gid)
        return self.config_path

    async def close(self) -> None:
        self._closed = True  # a connection accepted meanwhile is turned away (_accept)
        if self._server is not None:
            self._server.close()
            self._server = None
        pending = [*self._connections, *self._calls]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def export_listener(self) -> dict[str, Any] | None:
        """Restarting in place: the listening socket made to survive the exec, and what
        the next image needs to go on listening on it with the same cookie (a secret:
        for the state store only). None where there is no listener."""
        if self._server is None or not self._server.sockets or self.address is None:
            return None
        fd = os.dup(self._server.sockets[0].fileno())
        os.set_inheritable(fd, True)
        return {"pid": os.getpid(), "fd": fd, "inode": os.fstat(fd).st_ino,
                "cookie": self._cookie, "config": self.config.record()}  # fmt: skip

    def _warn(self, event: str, reason: str) -> None:
        """A warning about strangers' connections, at most one per WARN_INTERVAL_S and
        proxy (anyone on the node may connect as often as it likes), with the count of
        those left out since the last."""
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < WARN_INTERVAL_S:
            self._unwarned += 1
            return
        log.warning(event, job=self.global_job_id, reason=reason, not_logged=self._unwarned)
        self._warned_at, self._unwarned = now, 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closed:  # accepted as close() ran: its server is gone, so is this
            writer.close()
            return
        if len(self._strangers) >= MAX_STRANGERS:  # the oldest that showed no cookie
            oldest = next(iter(self._strangers))  # makes way: a job's condor_chirp
            oldest.cancel()  # sends its cookie at once, a squatter must keep reconnecting
            self._strangers.pop(oldest)
            self._warn("chirp_connection_refused",
                       f"more than {MAX_STRANGERS} connections without a cookie")
        self._strangers[task] = None
        self._connections.add(task)
        try:
            if not await self._authenticate(reader, writer):
                return
            del self._strangers[task]
            if len(self._clients) >= MAX_CONNECTIONS:
                self._warn("chirp_connection_refused",
                           f"more than {MAX_CONNECTIONS} connections")
                return
            self._clients.add(task)
            writer.write(b"0\n")
            await writer.drain()
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() ends the job's clients: this task ends normally (asyncio's stream
            # server logs a handler task that ends cancelled as an error).
            pass
        finally:
            self._strangers.pop(task, None)
            self._clients.discard(task)
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _authenticate(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> bool:  # fmt: skip
        """The first line must be the cookie, within COOKIE_WAIT_S of the connection;
        anything else is answered -1 (a second later, as condor_starter makes guessing
        cost time) and ends the connection."""
        try:
            async with asyncio.timeout(COOKIE_WAIT_S):
                raw = await reader.readuntil(b"\n")
        except TimeoutError:
            self._warn("chirp_request_refused", f"no cookie within {COOKIE_WAIT_S:g} s")
            return False
        except asyncio.LimitOverrunError:
            self._warn("chirp_request_refused", f"a line longer than {LINE_MAX} bytes")
            writer.write(f"{TOO_BIG}\n".encode())
            await writer.drain()
            return False
        parts = raw.rstrip(b"\r\n").split()  # "cookie %s", as condor_starter reads it
        if len(parts) >= 2 and parts[0] == b"cookie" \
                and secrets.compare_digest(parts[1], self._cookie.encode()):  # fmt: skip
            return True
        self._warn("chirp_request_refused", "wrong cookie" if len(parts) >= 2 and
                   parts[0] == b"cookie" else "no cookie presented")  # fmt: skip
        await asyncio.sleep(WRONG_COOKIE_DELAY_S)
        writer.write(f"{NOT_AUTHENTICATED}\n".encode())
        await writer.drain()
        return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """An authenticated client's requests, one line each, until it goes away."""
        while True:
            try:
                raw = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError:
                return  # the client went away (a last line without its newline is dropped)
            except asyncio.LimitOverrunError:
                raw = b""
            if not raw or len(raw.rstrip(b"\r\n")) > LINE_MAX:
                log.debug("chirp_request_refused", job=self.global_job_id,
                          reason=f"a line longer than {LINE_MAX} bytes")  # fmt: skip
                writer.write(f"{TOO_BIG}\n".encode())
                await writer.drain()
                return
            hold = BufferHold(self._buffers)
            try:
                writer.write(await self._request(raw.rstrip(b"\r\n"), reader, writer, hold))
                async with asyncio.timeout(chirp_files.DATA_WAIT_S):
                    await writer.drain()
            except TimeoutError:  # a client that does not read its answer: dropped,
                writer.transport.abort()  # and what waits to be sent with it
                raise ConnectionError("the client did not read its answer") from None
            finally:
                hold.release()

    async def _request(self, line: bytes, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, hold: BufferHold) -> bytes:  # fmt: skip
        try:
            text = line.decode()
        except UnicodeDecodeError:
            return self._invalid("not UTF-8")
        if "\0" in text:
            return self._invalid("a NUL byte")
        enabled = frozenset([UPDATES] if self.updates else []) | \
            frozenset([DELAYED] if self.delayed is not None else []) | \
            frozenset([FILES] if self.files else [])  # fmt: skip
        if (request := read_request(text, enabled)) is None:
            word = text.split(None, 1)[0][:40] if text.strip() else ""
            return self._invalid(f"{word!r} not served for this job")
        command, args = request.command, request.args
        if command == "version":
            return f"{CHIRP_VERSION}\n".encode()
        if command == "set_job_attr":
            return await self._call(args[0], self._set(args[0], args[1]))
        if command == "get_job_attr":
            return await self._call(args[0], self._get(args[0]))
        if command == "ulog":
            return await self._call(None, self._ulog(args[0]))
        if command == "putfile":  # its first answer written on the way, not timed out:
            return await chirp_files.put(self.shadow, args, reader, writer,  # the client's
                                         job=self.global_job_id,  # bytes follow that answer
                                         connected=self.connected, hold=hold)  # fmt: skip
        if command in chirp_files.WITH_DATA:
            return await chirp_files.write(self.shadow, command, args, reader, writer,
                                           job=self.global_job_id, connected=self.connected,
                                           hold=hold)  # fmt: skip
        if command in chirp_files.CALLS:
            return await self._call(None, chirp_files.call(self.shadow, command, args, hold),
                                    command)  # fmt: skip
        assert self.delayed is not None
        if command == "set_job_attr_delayed":
            return f"{self.delayed.record(args[0], args[1])}\n".encode()
        found = self.delayed.lookup(args[0])  # get_job_attr_delayed
        if found is None:
            return f"{DOESNT_EXIST}\n".encode()
        value = as_sent(found)  # the job ad's, as the shadow sent it
        return f"{len(value)}\n".encode() + value

    def _invalid(self, why: str) -> bytes:
        # Debug only: the job may send as many as it likes (condor_starter: D_SYSCALLS).
        log.debug("chirp_request_refused", job=self.global_job_id, reason=why)
        return f"{INVALID_REQUEST}\n".encode()

    async def _set(self, name: str, expr: str) -> bytes:
        await self.shadow.set_job_attr(name, expr)
        log.debug("chirp_job_attr_set", job=self.global_job_id, attr=name)
        return b"0\n"

    async def _get(self, name: str) -> bytes:
        value = as_sent(await self.shadow.get_job_attr(name))
        return f"{len(value)}\n".encode() + value

    async def _ulog(self, text: str) -> bytes:
        await self.shadow.ulog(generic_event(self.job, text))
        return b"0\n"

    async def _call(self, name: str | None, call: Coroutine[Any, Any, bytes],
                    what: str = "ulog") -> bytes:
        """One call to the shadow, its failure as Chirp's error (the daemon goes on).
        A call that outlasts CALL_TIMEOUT_S is answered "offline" but left to finish:
        cancelling it would cut a message to the shadow in half."""
        if name is not None and not ATTR_NAME.fullmatch(name):
            call.close()
            return self._invalid("an attribute name that is no ClassAd name")
        if not self.connected():
            call.close()
            return f"{OFFLINE}\n".encode()
        task = asyncio.ensure_future(call)
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)
        try:
            return await asyncio.wait_for(asyncio.shield(task), CALL_TIMEOUT_S)
        except SyscallError as exc:
            log.debug("chirp_call_refused", job=self.global_job_id, attr=name or what,
                     errno=exc.errno)  # fmt: skip
            return f"{chirp_error(exc.errno)}\n".encode()
        except (TimeoutError, ProtocolError) as exc:
            log.warning("chirp_call_failed", job=self.global_job_id, attr=name or what,
                        error=str(exc) or type(exc).__name__)  # fmt: skip
            return f"{OFFLINE}\n".encode()
