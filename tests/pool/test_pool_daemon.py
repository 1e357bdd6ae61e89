"""`execd run` as an execute point of the real pool (pool mode in the daemon).

Each test starts its own execd (a real `execd run` subprocess, FS authentication on
this host, its command port on loopback) beside the session's pool, and stops it; the
pool's own tools are the judges: condor_status lists what execd shows, the real
negotiator and schedd claim its slot, condor_drain and condor_vacate reach it.
"""

from __future__ import annotations

import pwd
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import (
    SLEEP_JOB,
    WAIT_S,
    PoolNode,
    clear_execute_points,
    pool_knob,
    pool_slots,
    start_node,
    wait_pool,
)

from execd.daemon.client import ControlClient


@pytest.fixture
def node(pool: harness.Pool) -> Iterator[PoolNode]:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        started = start_node(pool, Path(tmp))
        try:
            yield started
        finally:
            started.stop(signal.SIGQUIT)
            harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


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


def test_a_killed_execds_stale_ads_are_cleared_for_the_next_test(pool: harness.Pool) -> None:
    """The pool tier's isolation (conftest `no_execd_left`): an execd that dies without
    invalidating its ads leaves them in the collector; the teardown removes them."""
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        wait_pool(pool, "execd's slot", lambda s: s)
        harness.wait_for("execd's daemon ad", lambda: pool.status("-startd"), WAIT_S, 0.2)
        assert node.stop(signal.SIGKILL) == -signal.SIGKILL
        assert pool.status("-slots") != []  # nobody invalidated them
        assert clear_execute_points(pool) is True
        assert pool.status("-slots") == pool.status("-startd") == []
        assert clear_execute_points(pool) is False  # nothing left to clear


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


def test_real_negotiator_claims_a_dynamic_slot(pool: harness.Pool, node: PoolNode) -> None:
    wait_pool(pool, "execd's slot", lambda s: s)
    job = pool.submit(SLEEP_JOB)
    try:
        node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Idle", timeout=WAIT_S)
        claimed = node.wait_for("pool_claimed", timeout=WAIT_S)
        assert claimed["slot"] == "slot1_1" and "sock=schedd" in claimed["schedd"]
        assert claimed["claim"] == "<redacted>"  # claim ids never reach the log
        # the schedd activates the claim; execd starts it through the policy engine
        node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Busy", timeout=WAIT_S)
        node.wait_for("pool_activated", slot="slot1_1")
        node.wait_for("starter_spawned", slot="slot1_1", timeout=WAIT_S)
        # the reply's leftover: the partitionable slot kept what the d-slot did not take
        # (wait for a moment where both ads are current in the collector)
        def carved(slots: dict[str, dict[str, Any]]) -> bool:
            return sorted((ad["SlotType"], ad["Cpus"]) for ad in slots.values()) == [
                ("Dynamic", 1), ("Partitionable", 1)]

        slots = wait_pool(pool, "the d-slot and the leftover in condor_status",
                          lambda s: carved(s) and s)  # fmt: skip
        assert any(name.startswith("slot1_") for name in slots)
        log = pool.daemon_log("SchedLog")
        assert "slot1_1@" in log
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
    # the schedd releases the claim; the d-slot goes, in execd and in the collector
    node.wait_for("dynamic_slot_deleted", slot="slot1_1", timeout=WAIT_S)
    wait_pool(pool, "the d-slot gone", lambda s: len(s) == 1)


def chroot_condor_identity(pool: harness.Pool) -> str:
    """The name this host's passwd gives the chroot's condor uid (its tools' FS identity)."""
    uid = int(pool.tool("id", "-u", "condor").check().stdout)
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def administrators(pool: harness.Pool) -> str:
    """execd's config line that makes the pool's tools (run as root in the chroot, whose
    condor identity they use) its administrators."""
    return f"EXECD_POOL_ADMINISTRATORS = {chroot_condor_identity(pool)}@*\n"


@pytest.fixture
def admin_node(pool: harness.Pool) -> Iterator[PoolNode]:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        admins = administrators(pool)
        started = start_node(pool, Path(tmp), admins)
        try:
            yield started
        finally:
            started.stop(signal.SIGQUIT)
            harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


def test_condor_drain_and_cancel_from_an_administrator_only(pool: harness.Pool,
                                                            admin_node: PoolNode) -> None:
    (name,) = wait_pool(pool, "execd's slot", lambda s: s)
    refused = pool.tool("condor_drain", name, user=harness.SUBMITTER)
    assert refused.returncode != 0
    denied = admin_node.wait_for("pool_command_refused", command=512)
    assert denied["authz_level"] == "ADMINISTRATOR"
    assert denied["why"].startswith("ADMINISTRATOR authorization policy contains no "
                                    f"matching ALLOW entry for {denied['user']} "), denied
    assert denied["why"].endswith("(EXECD_POOL_ADMINISTRATORS)"), denied
    assert admin_node.slots()[name]["State"] == "Unclaimed"

    pool.tool("condor_drain", "-reason", "kernel update", name).check()
    admin_node.wait_for("pool_drain", how="graceful", reason="kernel update")
    assert admin_node.slots()[name]["State"] == "Drained"
    wait_pool(pool, "Drained in condor_status", lambda s: s[name]["State"] == "Drained")

    pool.tool("condor_drain", "-cancel", name).check()
    admin_node.wait_for("pool_drain_cancelled")
    wait_pool(pool, "Unclaimed again", lambda s: s[name]["State"] == "Unclaimed")


def local_claim(node: PoolNode) -> str:
    with ControlClient(node.root / "state" / "log" / "execd.sock") as client:
        claim = client.call("request_claim", {"job": {"RequestCpus": 1, "RequestMemory": 64}})
    return str(claim["slot"])


def test_condor_vacate_evicts_a_claim_by_name_and_all_fast(pool: harness.Pool,
                                                           admin_node: PoolNode) -> None:
    wait_pool(pool, "execd's slot", lambda s: s)
    first, second = local_claim(admin_node), local_claim(admin_node)
    slots = wait_pool(pool, "two claimed d-slots", lambda s: sum(
        ad["State"] == "Claimed" for ad in s.values()) == 2 and s)
    (full,) = [n for n in slots if n.startswith(f"{first}@")]
    pool.tool("condor_vacate", full).check()
    admin_node.wait_for("pool_vacated", slots=[first], fast=False)
    admin_node.wait_for("dynamic_slot_deleted", slot=first)
    assert admin_node.slots()[full.replace(first, second)]["State"] == "Claimed"

    pool.tool("condor_vacate", "-fast", "-addr", admin_node.address()).check()
    admin_node.wait_for("pool_vacated", slots=[second], fast=True)
    admin_node.wait_for("dynamic_slot_deleted", slot=second)
    wait_pool(pool, "only the partitionable slot", lambda s: len(s) == 1)


def test_real_negotiator_claims_a_static_slot(pool: harness.Pool) -> None:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "SLOT_TYPE_1_PARTITIONABLE = False\n")
        try:
            (name,) = wait_pool(pool, "execd's static slot", lambda s: s)
            assert pool_slots(pool)[name]["SlotType"] == "Static"
            job = pool.submit(SLEEP_JOB)
            try:
                # the advertised offer becomes the claim: no d-slot, no leftover
                node.wait_for("slot_state_changed", slot="slot1", new="Claimed/Idle",
                              timeout=WAIT_S)  # fmt: skip
                node.wait_for("pool_claimed", slot="slot1", timeout=WAIT_S)
                node.wait_for("slot_state_changed", slot="slot1", new="Claimed/Busy",
                              timeout=WAIT_S)  # fmt: skip
                assert list(node.slots()) == [name]
            finally:
                pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
            node.wait_for("pool_claim_ended", slot="slot1", timeout=WAIT_S)
            wait_pool(pool, "the slot free again", lambda s: s[name]["State"] != "Claimed")
        finally:
            assert node.stop(signal.SIGQUIT) == 0
        harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


def test_daemon_authenticates_with_a_token_file(pool: harness.Pool) -> None:
    domain = pool_knob(pool, "UID_DOMAIN")
    token = pool.tool("condor_token_create", "-identity", f"condor@{domain}").check().stdout
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        token_file = Path(tmp) / "pool.token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        node = start_node(pool, Path(tmp), f"EXECD_POOL_TOKEN_FILE = {token_file}\n")
        try:
            (ad,) = wait_pool(pool, "execd's slot", lambda s: s).values()
            assert ad["AuthenticationMethod"] == "IDTOKENS"
            assert ad["AuthenticatedIdentity"] == f"condor@{domain}"
            assert token.strip() not in node.log.read_text()
        finally:
            assert node.stop(signal.SIGTERM) == 0
        assert pool.status("-slots") == []
