"""execd's shared-port endpoint: what condor_shared_port sends it (a CEDAR message
{int 76}, then one byte carrying a TCP socket with SCM_RIGHTS, shared_port_client.cpp)
hands that socket on; anything else is dropped with a logged reason. Real Unix and TCP
sockets here; the real condor_shared_port in tests/pool/test_pool_shared_port.py."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from execd.errors import ConfigError
from execd.wire.shared_port import SharedPortEndpoint, check_endpoint_id, endpoint_address

PASS = b"\x01" + struct.pack(">I", 8) + struct.pack(">q", 76)


async def _send(path: Path, data: bytes, fds: list[int]) -> None:
    def send() -> None:
        with socket.socket(socket.AF_UNIX) as unix:
            unix.connect(str(path))
            unix.sendall(data)
            if fds:
                socket.send_fds(unix, [b"\0"], fds)
            unix.shutdown(socket.SHUT_WR)
            with contextlib.suppress(ConnectionResetError):
                unix.recv(1)  # returns once the endpoint is done with this pass

    await asyncio.to_thread(send)


@pytest.mark.asyncio
async def test_a_passed_tcp_socket_is_handed_on_and_anything_else_dropped(tmp_path: Path) -> None:
    adopted: list[socket.socket] = []
    endpoint = SharedPortEndpoint(str(tmp_path), "execd_test", adopted.append)
    await endpoint.start()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    unix_a, unix_b = socket.socketpair()
    try:
        assert (tmp_path / "execd_test").stat().st_mode & 0o777 == 0o600
        with capture_logs() as events:
            await _send(endpoint.path, PASS, [accepted.fileno()])
            await _send(endpoint.path, PASS, [unix_a.fileno()])  # not TCP
            await _send(endpoint.path, b"\x01" + struct.pack(">I", 8) + struct.pack(">q", 75),
                        [accepted.fileno()])  # fmt: skip
            await _send(endpoint.path, b"GET / HTTP/1.0\r\n\r\n", [])
            await _send(endpoint.path, PASS[:7], [])  # stops mid-message
        (passed,) = adopted
        assert passed.getpeername() == client.getsockname()  # the very connection
        client.sendall(b"ping")
        assert passed.recv(4) == b"ping"
        reasons = [e["reason"] for e in events if e["event"] == "shared_port_pass_failed"]
        assert reasons == ["shared port passed a socket that is not TCP",
                           "shared port sent no SHARED_PORT_PASS_SOCK message",
                           "shared port sent no SHARED_PORT_PASS_SOCK message",
                           "shared port closed before passing a socket"]  # fmt: skip
    finally:
        for s in (*adopted, listener, client, accepted, unix_a, unix_b):
            s.close()
        await endpoint.close()
    assert not endpoint.path.exists()


def test_endpoint_names_and_addresses_are_checked(tmp_path: Path) -> None:
    assert endpoint_address("127.0.0.1:9618", "execd") == \
        "<127.0.0.1:9618?addrs=127.0.0.1-9618&noUDP&sock=execd>"
    assert check_endpoint_id("execd_1-2.x") == "execd_1-2.x"
    for bad in ("", "../collector", "a/b", ".hidden", "sp ace"):
        with pytest.raises(ConfigError, match="shared port id"):
            check_endpoint_id(bad)
    with pytest.raises(ConfigError, match="EXECD_SHARED_PORT 'nohost' is not host:port"):
        endpoint_address("nohost", "execd")

    async def start_in_missing_dir() -> None:
        await SharedPortEndpoint(str(tmp_path / "absent"), "execd", lambda s: None).start()

    with pytest.raises(ConfigError, match="DAEMON_SOCKET_DIR"):
        asyncio.run(start_in_missing_dir())
