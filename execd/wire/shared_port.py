"""execd as an endpoint behind HTCondor's condor_shared_port on the same host.

A client reaches a daemon behind the shared port with address
`<host:port?addrs=host-port&noUDP&sock=ID>`: it connects to the shared port and sends
SHARED_PORT_CONNECT (int 75, string ID, ...). condor_shared_port then connects, as root,
to the Unix socket of endpoint ID (on Linux first the abstract name its own daemons
share through a per-master cookie, then the file `$(DAEMON_SOCKET_DIR)/ID`), sends one
CEDAR message holding int SHARED_PORT_PASS_SOCK (76), and passes the client's TCP
socket with SCM_RIGHTS in a one-byte message (shared_port_client.cpp). The client then
speaks to the endpoint as if it had connected directly; the DC_AUTHENTICATE that
follows is the endpoint's.

execd listens on the file socket (it is no child of that condor_master, so it has no
cookie). The socket is root's, mode 0600: only root (condor_shared_port connects as
root) may hand execd a connection. A peer that sends anything else on it is logged and
dropped; a passed socket that is not a TCP socket is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from execd.errors import ConfigError, ProtocolError, RemoteProtocolError
from execd.log import get_logger

log = get_logger("wire")
SHARED_PORT_PASS_SOCK = 76
ENDPOINT_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
PASS_TIMEOUT_S = 10.0

Adopt = Callable[[socket.socket], None]


def check_endpoint_id(endpoint_id: str) -> str:
    """HTCondor's SharedPortIdIsValid: letters, digits, `_-.`; ConfigError otherwise."""
    if not endpoint_id or not set(endpoint_id) <= ENDPOINT_ID_CHARS or endpoint_id[0] == ".":
        raise ConfigError(f"shared port id {endpoint_id!r} may hold only letters, digits, "
                          "'_', '-' and '.'")  # fmt: skip
    return endpoint_id


class SharedPortEndpoint:
    """The Unix socket condor_shared_port passes execd's connections to."""

    def __init__(self, socket_dir: str, endpoint_id: str, adopt: Adopt) -> None:
        self.path = Path(socket_dir) / check_endpoint_id(endpoint_id)
        self.endpoint_id = endpoint_id
        self.adopt = adopt
        self._listener: socket.socket | None = None
        self._task: asyncio.Task[None] | None = None
        self._passes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        directory = self.path.parent
        if not directory.is_dir():
            raise ConfigError(f"DAEMON_SOCKET_DIR {directory} does not exist (is the "
                              "pool's condor_shared_port running on this host?)")  # fmt: skip
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(self.path.lstat().st_mode):
                self.path.unlink()  # an earlier execd's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        listener.listen(64)
        listener.setblocking(False)
        self._listener = listener
        self._task = asyncio.get_running_loop().create_task(self._accept_loop())

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._passes) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            conn, _ = await loop.sock_accept(self._listener)
            task = loop.create_task(self._passed(conn))
            self._passes.add(task)
            task.add_done_callback(self._passes.discard)

    async def _passed(self, conn: socket.socket) -> None:
        """One pass: a CEDAR message {int 76}, then one byte carrying the socket.
        Everything is read with recvmsg, so no descriptor is dropped by a plain read."""
        fds: list[int] = []
        try:
            data = await asyncio.wait_for(_read_pass(conn, fds), PASS_TIMEOUT_S)
            if data[:5] != PASS_HEADER or int.from_bytes(data[5:13], "big", signed=True) \
                    != SHARED_PORT_PASS_SOCK:  # fmt: skip
                raise RemoteProtocolError("shared port sent no SHARED_PORT_PASS_SOCK message")
            if len(fds) != 1:
                raise RemoteProtocolError(f"shared port passed {len(fds)} descriptors, not 1")
            passed = socket.socket(fileno=fds.pop())
            if passed.family not in (socket.AF_INET, socket.AF_INET6) \
                    or passed.type != socket.SOCK_STREAM:  # fmt: skip
                passed.close()
                raise RemoteProtocolError("shared port passed a socket that is not TCP")
            self.adopt(passed)
        except (ProtocolError, OSError, TimeoutError) as exc:
            log.warning("shared_port_pass_failed", endpoint=self.endpoint_id,
                        reason=str(exc) or type(exc).__name__)  # fmt: skip
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()


# The message before the descriptor: last-packet flag, 8 bytes, int64 76.
PASS_HEADER = b"\x01" + (8).to_bytes(4, "big")
PASS_BYTES = 5 + 8 + 1


async def _read_pass(conn: socket.socket, fds: list[int]) -> bytes:
    """Read the pass message and its descriptor(s) with recvmsg (fds collected in `fds`)."""
    loop = asyncio.get_running_loop()
    conn.setblocking(False)
    data = b""
    while len(data) < PASS_BYTES:
        try:
            chunk, got, _, _ = socket.recv_fds(conn, PASS_BYTES - len(data), 4)
        except BlockingIOError:
            await _readable(loop, conn)
            continue
        fds.extend(got)
        if not chunk:
            raise RemoteProtocolError("shared port closed before passing a socket")
        data += chunk
    return data


async def _readable(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(conn.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())


def endpoint_address(shared_port: str, endpoint_id: str) -> str:
    """The sinful string of endpoint `endpoint_id` behind the shared port `host:port`."""
    host, sep, port = shared_port.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"EXECD_SHARED_PORT {shared_port!r} is not host:port")
    return f"<{host}:{port}?addrs={host}-{port}&noUDP&sock={check_endpoint_id(endpoint_id)}>"
