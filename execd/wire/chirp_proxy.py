"""The starter's Chirp I/O proxy: `condor_chirp` from inside a pool job.

As condor_starter (io_proxy.cpp, io_proxy_handler.cpp, jic_shadow.cpp initIOProxy),
execd listens for each pool job on the loopback (127.0.0.1, a port the kernel picks)
and writes `<address> <port> <cookie>` into the sandbox's `.chirp.config` (mode 0600,
the job's user's; the job finds it through `_CONDOR_CHIRP_CONFIG`). A client must
first send `cookie <cookie>`; until it has, every line is answered -1 (not
authenticated), and a wrong cookie (or a line that is none) costs its connection a
second, as condor_starter sleeps after a wrong one. The cookie is never logged. Then
one text line per request (Chirp's protocol, condor_chirp/PROTOCOL), answered with a
number line: >= 0 success, < 0 a Chirp error.

Served, when the job ad says `WantRemoteUpdates` or else `WantIOProxy` is true (the
updates condor_starter enables with them), by the shadow's remote system calls on the
conversation's connection (shadow_syscalls.py): `set_job_attr NAME EXPR`,
`get_job_attr NAME` (the length, then the expression's text), `ulog TEXT` (a generic
event, 008, in the user log; the text cut to 1023 bytes as GenericEvent cuts it) and
`version` (2). The shadow decides what may be set (PROTECTED_JOB_ATTRS, IMMUTABLE ...:
EACCES, answered -2). Every other request, and these without the job ad's say-so, is
answered -8 (invalid request), as condor_starter answers a request it does not serve;
the file I/O calls (open, read, getfile, putfile, ...) and `constrain` are not served
by execd. The delayed updates (set_job_attr_delayed, get_job_attr_delayed) are served
to every job unless its ad says `WantDelayedUpdates = false` (chirp_delayed.py).

Requests are read as condor_starter reads them (chirp_protocol.py: its order, its
prefix matching, words with backslash escapes, extra words ignored). A line longer than
5120 bytes is answered -5 (too big) and its connection closed; one that is not UTF-8
or holds a NUL is answered -8. At most MAX_CONNECTIONS clients per job at once, and
one that has not shown the cookie is closed after COOKIE_WAIT_S without a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import string
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire.chirp_delayed import DelayedUpdates, wants_delayed
from execd.wire.chirp_protocol import (
    CHIRP_VERSION,
    DELAYED,
    DOESNT_EXIST,
    INVALID_REQUEST,
    LINE_MAX,
    NOT_AUTHENTICATED,
    OFFLINE,
    TOO_BIG,
    UPDATES,
    chirp_error,
    read_request,
)
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.filetransfer import CHIRP_CONFIG
from execd.wire.shadow_syscalls import SyscallError

log = get_logger("wire")

COOKIE_LENGTH = 31  # condor_starter: 31 random lowercase letters
INFO_MAX = 1023  # GenericEvent's info[1024]
MAX_CONNECTIONS = 16
WRONG_COOKIE_DELAY_S = 1.0
COOKIE_WAIT_S = 10.0
CALL_TIMEOUT_S = 20.0
ULOG_GENERIC = 8
_ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ChirpShadow(Protocol):
    """What the proxy asks of the shadow (ShadowSyscalls has it)."""

    update_extra: Callable[[], WireAd] | None

    async def get_job_attr(self, name: str) -> str: ...
    async def set_job_attr(self, name: str, expr: str) -> None: ...
    async def ulog(self, ad: Mapping[str, str]) -> None: ...


def wants_updates(job: Mapping[str, object]) -> bool:
    """condor_starter's want_updates: WantRemoteUpdates where the job ad has it as a
    boolean, else WantIOProxy."""
    remote = job.get("WantRemoteUpdates")
    if isinstance(remote, bool):
        return remote
    return job.get("WantIOProxy") is True


@dataclass(frozen=True)
class ChirpAddress:
    """What `.chirp.config` says: where the proxy listens and its cookie (a secret)."""

    host: str
    port: int
    cookie: str

    def __repr__(self) -> str:
        return f"ChirpAddress({self.host}:{self.port})"

    def line(self) -> str:
        return f"{self.host} {self.port} {self.cookie}\n"

    @classmethod
    def read(cls, path: Path) -> ChirpAddress:
        """ValueError naming the problem (the cookie stays out of it)."""
        fields = path.read_text().split()
        if len(fields) != 3 or not fields[1].isdigit() or not fields[2].isalpha():
            raise ValueError(f"{path} does not hold '<address> <port> <cookie>'")
        return cls(fields[0], int(fields[1]), fields[2])


def new_cookie() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(COOKIE_LENGTH))


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
                 job_wire: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.shadow = shadow
        # Delayed updates ride on the conversation's updates to the shadow.
        self.delayed = DelayedUpdates(job_wire or {}) if wants_delayed(job) else None
        if self.delayed is not None:
            shadow.update_extra = self.delayed.take
        # False while the shadow is away: calls are answered "offline" at once, as
        # condor_starter answers them (ETIMEDOUT) when its syscall socket is down.
        self.connected = connected
        self._calls: set[asyncio.Task[bytes]] = set()
        self.job = job
        self.global_job_id = global_job_id
        self.updates = wants_updates(job)
        self._cookie = cookie or new_cookie()
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self.address: ChirpAddress | None = None
        self.config_path: Path | None = None

    async def listen(self, host: str = "127.0.0.1", port: int = 0) -> ChirpAddress:
        """OSError if the port cannot be had (a restart finding it taken)."""
        self._server = await asyncio.start_server(self._accept, host, port,
                                                  limit=LINE_MAX + 2, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        self.address = ChirpAddress(str(bound[0]), int(bound[1]), self._cookie)
        log.info("chirp_proxy_listening", job=self.global_job_id,
                 address=f"{bound[0]}:{bound[1]}", updates=self.updates)  # fmt: skip
        return self.address

    def write_config(self, sandbox: Path, uid: int, gid: int) -> Path:
        """`.chirp.config` in the sandbox, readable by the job's user only."""
        assert self.address is not None, "listen() first"
        path = sandbox / CHIRP_CONFIG
        with contextlib.suppress(FileNotFoundError):  # one the job's input brought: ours
            os.unlink(path)  # replaces it, as condor_starter's (a link is not followed)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchown(fd, uid, gid)
            os.write(fd, self.address.line().encode())
        finally:
            os.close(fd)
        self.config_path = path
        return path

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        pending = [*self._clients, *self._calls]
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._clients) >= MAX_CONNECTIONS:
            log.warning("chirp_connection_refused", job=self.global_job_id,
                        reason="too many connections", limit=MAX_CONNECTIONS)  # fmt: skip
            writer.close()
            return
        self._clients.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() ends the job's clients: this task ends normally (asyncio's stream
            # server logs a handler task that ends cancelled as an error).
            pass
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        authenticated = False
        while True:
            try:
                # Until it has shown the cookie a client has COOKIE_WAIT_S for each line:
                # anyone on the node may connect, and connections per job are limited.
                raw = await asyncio.wait_for(reader.readuntil(b"\n"),
                                             None if authenticated else COOKIE_WAIT_S)
            except asyncio.IncompleteReadError:
                return  # the client went away (a last line without its newline is dropped)
            except TimeoutError:
                log.warning("chirp_request_refused", job=self.global_job_id,
                            reason=f"no cookie within {COOKIE_WAIT_S:g} s")  # fmt: skip
                return
            except asyncio.LimitOverrunError:
                raw = b""
            if not raw or len(raw.rstrip(b"\r\n")) > LINE_MAX:
                log.warning("chirp_request_refused", job=self.global_job_id,
                            reason=f"a line longer than {LINE_MAX} bytes")  # fmt: skip
                writer.write(f"{TOO_BIG}\n".encode())
                await writer.drain()
                return
            line = raw.rstrip(b"\r\n")
            if authenticated:
                answer = await self._request(line)
            else:
                authenticated = await self._cookie_request(line)
                answer = b"0\n" if authenticated else f"{NOT_AUTHENTICATED}\n".encode()
            writer.write(answer)
            await writer.drain()

    async def _cookie_request(self, line: bytes) -> bool:
        parts = line.split()  # "cookie %s", as condor_starter reads it
        if len(parts) < 2 or parts[0] != b"cookie":
            log.warning("chirp_request_refused", job=self.global_job_id,
                        reason="no cookie presented")  # fmt: skip
            await asyncio.sleep(WRONG_COOKIE_DELAY_S)  # (and keeps the log from flooding)
            return False
        given = parts[1]
        if secrets.compare_digest(given, self._cookie.encode()):
            return True
        log.warning("chirp_request_refused", job=self.global_job_id, reason="wrong cookie")
        await asyncio.sleep(WRONG_COOKIE_DELAY_S)  # as condor_starter: guessing costs time
        return False

    async def _request(self, line: bytes) -> bytes:
        try:
            text = line.decode()
        except UnicodeDecodeError:
            return self._invalid("not UTF-8")
        if "\0" in text:
            return self._invalid("a NUL byte")
        enabled = frozenset([UPDATES] if self.updates else []) | \
            frozenset([DELAYED] if self.delayed is not None else [])  # fmt: skip
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
        assert self.delayed is not None
        if command == "set_job_attr_delayed":
            return f"{self.delayed.record(args[0], args[1])}\n".encode()
        found = self.delayed.lookup(args[0])  # get_job_attr_delayed
        if found is None:
            return f"{DOESNT_EXIST}\n".encode()
        return f"{len(found.encode())}\n".encode() + found.encode()

    def _invalid(self, why: str) -> bytes:
        # Debug only: the job may send as many as it likes (condor_starter: D_SYSCALLS).
        log.debug("chirp_request_refused", job=self.global_job_id, reason=why)
        return f"{INVALID_REQUEST}\n".encode()

    async def _set(self, name: str, expr: str) -> bytes:
        await self.shadow.set_job_attr(name, expr)
        log.debug("chirp_job_attr_set", job=self.global_job_id, attr=name)
        return b"0\n"

    async def _get(self, name: str) -> bytes:
        value = (await self.shadow.get_job_attr(name)).encode()
        return f"{len(value)}\n".encode() + value

    async def _ulog(self, text: str) -> bytes:
        await self.shadow.ulog(generic_event(self.job, text))
        return b"0\n"

    async def _call(self, name: str | None, call: Coroutine[Any, Any, bytes]) -> bytes:
        """One call to the shadow, its failure as Chirp's error (the daemon goes on).
        A call that outlasts CALL_TIMEOUT_S is answered "offline" but left to finish:
        cancelling it would cut a message to the shadow in half."""
        if name is not None and not _ATTR_NAME.fullmatch(name):
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
            log.debug("chirp_call_refused", job=self.global_job_id, attr=name or "ulog",
                     errno=exc.errno)  # fmt: skip
            return f"{chirp_error(exc.errno)}\n".encode()
        except (TimeoutError, ProtocolError) as exc:
            log.warning("chirp_call_failed", job=self.global_job_id, attr=name or "ulog",
                        error=str(exc) or type(exc).__name__)  # fmt: skip
            return f"{OFFLINE}\n".encode()


async def open_chirp_proxy(shadow: ChirpShadow, job: Mapping[str, object], global_job_id: str,
                           sandbox: Path, *, owner: tuple[int, int],
                           connected: Callable[[], bool],
                           job_wire: Mapping[str, str] | None = None,
                           ) -> ChirpProxy | None:  # fmt: skip
    """A job's proxy, listening, its `.chirp.config` written; None (logged) where that
    fails: the job runs without one, as condor_starter's does when its proxy fails."""
    proxy = ChirpProxy(shadow, job, global_job_id=global_job_id, connected=connected,
                       job_wire=job_wire)  # fmt: skip
    try:
        await proxy.listen()
        proxy.write_config(sandbox, *owner)
    except OSError as exc:
        log.error("chirp_proxy_failed", job=global_job_id, error=str(exc))
        await proxy.close()
        return None
    return proxy


async def reopen_chirp_proxy(shadow: ChirpShadow, job: Mapping[str, object],
                             global_job_id: str, sandbox: Path, *,
                             connected: Callable[[], bool],
                             job_wire: Mapping[str, str] | None = None,
                           ) -> ChirpProxy | None:  # fmt: skip
    """After a restart in place: the proxy again on the address and cookie the job's
    `.chirp.config` holds (the job keeps using them). None (logged) where the file is
    gone or the port is taken meanwhile: the job's condor_chirp then cannot connect."""
    path = sandbox / CHIRP_CONFIG
    try:
        address = ChirpAddress.read(path)
    except FileNotFoundError:
        return None  # a job started before execd served Chirp
    except (OSError, ValueError) as exc:
        log.error("chirp_proxy_not_restored", job=global_job_id, error=str(exc))
        return None
    proxy = ChirpProxy(shadow, job, global_job_id=global_job_id, cookie=address.cookie,
                       connected=connected, job_wire=job_wire)  # fmt: skip
    try:
        await proxy.listen(address.host, address.port)
    except OSError as exc:
        log.error("chirp_proxy_not_restored", job=global_job_id,
                  address=f"{address.host}:{address.port}", error=str(exc))  # fmt: skip
        await proxy.close()
        return None
    return proxy
