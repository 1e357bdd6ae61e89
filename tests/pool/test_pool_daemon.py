"""`execd run` as an execute point of the real pool (pool mode in the daemon).

Each test starts its own execd (a real `execd run` subprocess, FS authentication on
this host, its command port on loopback) beside the session's pool, and stops it; the
pool's own tools are the judges: condor_status lists what execd shows, the real
negotiator and schedd claim its slot, condor_drain and condor_vacate reach it.
"""

from __future__ import annotations

import json
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest

from tests.component.daemon_harness import RunningDaemon

WAIT_S = 60
SLEEP_JOB = """\
executable = /bin/sleep
arguments = 300
should_transfer_files = NO
log = job.log
request_cpus = 1
request_memory = 64
queue
"""


class PoolNode(RunningDaemon):
    """An execd in pool mode, with helpers to compare its view with the pool's."""

    def slots(self) -> dict[str, dict[str, Any]]:
        done = self.execd("status", "-json")
        assert done.returncode == 0, done.stderr
        return {ad["Name"]: ad for ad in json.loads(done.stdout)}

    joined: dict[str, Any]

    def address(self) -> str:
        return str(self.joined["address"])

    def port(self) -> int:
        return int(self.address().split(":")[1].split("?")[0].rstrip(">"))


def pool_knob(pool: harness.Pool, name: str) -> str:
    return pool.tool("condor_config_val", name).check().stdout.strip()


def start_node(pool: harness.Pool, root: Path, extra: str = "") -> PoolNode:
    """execd joined to the pool; it shares the pool's domains (one host, one passwd)."""
    root.chmod(0o755)
    domains = "".join(f"{knob} = {pool_knob(pool, knob)}\n"
                      for knob in ("UID_DOMAIN", "FILESYSTEM_DOMAIN"))
    node = PoolNode(root, f"COLLECTOR_HOST = {pool.collector}\nUPDATE_INTERVAL = 2\n" + domains +
                          "NUM_CPUS = 2\nMEMORY = 1024\nEXECD_COMMAND_ADDRESS = 127.0.0.1:0\n"
                          + extra)  # fmt: skip
    node.start()
    node.joined = node.wait_for("pool_joined")
    return node


@pytest.fixture
def node(pool: harness.Pool) -> Iterator[PoolNode]:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        started = start_node(pool, Path(tmp))
        try:
            yield started
        finally:
            started.stop(signal.SIGQUIT)
            harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


def pool_slots(pool: harness.Pool) -> dict[str, dict[str, Any]]:
    return {ad["Name"]: ad for ad in pool.status("-slots")}


def test_condor_status_lists_execds_slots_as_execd_shows_them(pool: harness.Pool,
                                                              node: PoolNode) -> None:
    listed = harness.wait_for("execd's slot in condor_status", lambda: pool_slots(pool), WAIT_S)
    mine = node.slots()
    assert set(listed) == set(mine)
    for name, ad in mine.items():
        for attr in ("State", "Activity", "Cpus", "Memory"):
            assert listed[name][attr] == ad[attr], (name, attr)
    (name,) = listed
    long = pool.tool("condor_status", "-l", name).check().stdout
    names = {line.split(" = ", 1)[0] for line in long.splitlines() if " = " in line}
    assert {"Requirements", "Start", "Rank", "MyAddress", "CondorVersion"} <= names
    assert "ClaimId" not in names  # the private ad stays private


def test_shutdown_invalidates_the_ads(pool: harness.Pool) -> None:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        try:
            harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
        finally:
            node.stop(signal.SIGTERM)
        # no waiting for an ad lifetime: the ads are gone once execd has exited
        assert pool.status("-slots") == []
        assert node.events()[-1]["event"] == "execd_stopped"
        assert any(e["event"] == "pool_left" for e in node.events())


def test_garbage_on_the_command_port_is_dropped_and_logged(pool: harness.Pool,
                                                           node: PoolNode) -> None:
    port = node.port()
    with socket.create_connection(("127.0.0.1", port)) as bad:
        bad.sendall(b"GET / HTTP/1.0\r\n\r\n")  # 'G' is no packet's end flag
        bad.shutdown(socket.SHUT_WR)
        assert bad.recv(100) == b""  # execd closed it
    dropped = node.wait_for("wire_connection_dropped")
    assert dropped["peer"].startswith("127.0.0.1:")
    assert "end flag" in dropped["reason"], dropped
    # the daemon goes on: the pool's own client is served on the same port
    ping = pool.tool("condor_ping", "-addr", node.address(), "-table", "READ")
    assert "READ" in ping.stdout + ping.stderr
    assert node.proc is not None and node.proc.poll() is None
