"""execd behind the pool's own condor_shared_port (HTCondor's shared-port convention).

With EXECD_SHARED_PORT = the pool's shared port and DAEMON_SOCKET_DIR = the pool's
$(LOCK)/daemon_sock, execd listens on the Unix socket `execd` there and advertises
`<127.0.0.1:PORT?...&sock=execd>`: the one port of the whole pool. The real
condor_ping, the real negotiator, schedd and shadow all reach execd through the real
condor_shared_port, which passes each connection on with SCM_RIGHTS.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from pathlib import Path

import pool_harness as harness
from pool_node import SLEEP_JOB, WAIT_S, pool_knob, start_node, wait_pool
from test_pool_daemon import chroot_condor_identity

SOCKET_DIR = f"{harness.LOCAL_DIR}/lock/daemon_sock"


def test_execd_is_reached_through_the_pools_shared_port(pool: harness.Pool) -> None:
    socket_dir = pool.host_path(SOCKET_DIR)
    if not socket_dir.is_dir():  # the shared port daemon makes it only for itself
        socket_dir.mkdir(mode=0o755)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        admin = f"{chroot_condor_identity(pool)}@{pool_knob(pool, 'UID_DOMAIN')}"
        node = start_node(pool, Path(tmp), f"EXECD_SHARED_PORT = {pool.collector}\n"
                                           f"DAEMON_SOCKET_DIR = {socket_dir}\n"
                                           f"EXECD_POOL_ADMINISTRATORS = {admin}\n")  # fmt: skip
        port = pool.collector.rsplit(":", 1)[1]
        endpoint = socket_dir / "execd"
        assert endpoint.is_socket() and (endpoint.stat().st_mode & 0o777) == 0o600

        (ad,) = wait_pool(pool, "execd's slot", lambda s: s).values()
        assert node.address() == (f"<127.0.0.1:{port}?addrs=127.0.0.1-{port}"
                                  f"&alias={ad['Machine']}&noUDP&sock=execd>")  # fmt: skip
        assert ad["MyAddress"] == node.address()
        ping = pool.tool("condor_ping", "-addr", node.address(), "-verbose", "DRAIN_JOBS")
        out = ping.stdout + ping.stderr
        for expected in ("Authorized:                  TRUE",
                         "Authenticated using:         FS",  # bound to ...?sock=execd
                         f"Remote Mapping:              {admin}"):  # fmt: skip
            assert expected in out, out
        command = node.wait_for("wire_command", command=512)
        assert command["method"] == "FS" and command["user"] == admin

        # something other than the shared port on execd's endpoint is dropped
        with socket.socket(socket.AF_UNIX) as bad:
            bad.connect(str(endpoint))
            bad.sendall(b"GET / HTTP/1.0\r\n\r\n")
            bad.shutdown(socket.SHUT_WR)
            with contextlib.suppress(ConnectionResetError):  # closed with bytes unread
                assert bad.recv(10) == b""
        assert "SHARED_PORT_PASS_SOCK" in node.wait_for("shared_port_pass_failed")["reason"]

        job = pool.submit(SLEEP_JOB)
        try:  # the real schedd and shadow come through the shared port too
            claimed = node.wait_for("pool_claimed", slot="slot1_1", timeout=WAIT_S)
            assert "sock=schedd" in claimed["schedd"]
            node.wait_for("pool_activated", slot="slot1_1", timeout=WAIT_S)
        finally:
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
        assert node.stop() == 0
        assert not endpoint.exists()
    assert os.path.isdir(socket_dir)
