"""ALLOW_<LEVEL>/DENY_<LEVEL> on execd as on condor_startd: the same policy, the same
tools, the same identities allowed and refused.

One pool with HTCondor's own startd and an execd beside it (a node name of its own).
Both get the same startd-only policy (the _STARTD knobs, so the collector, negotiator
and schedd keep theirs): READ denied to one token identity, which is an administrator
from LOCALHOST* (a host name pattern, case-blind, matched against 127.0.0.1's
reverse-DNS name, which must resolve back to it); another is an administrator from
10.0.0.0/8 only; a third from `localhost` (a host name, which stands for the addresses
it resolves to when the policy is loaded, on execd before the new policy applies:
authz_policy_applied). The submitter holds
each identity's IDTOKEN in turn (IDTOKENS only: FS would map its uid through the
chroot's passwd on condor_startd and the host's on execd; authentication required, or
condor_startd answers READ commands unauthenticated) and runs condor_status
-direct, condor_config_val -addr, condor_history -startd, condor_vacate and
condor_drain against each execute point: the same runs are allowed and refused on
both, and execd logs each refusal with its level and the policy's reason. A bad entry
at a reload is refused naming its knob, and the policy in force stays.
"""

from __future__ import annotations

import re
import signal
import tempfile
from pathlib import Path

import pool_harness as harness
from pool_node import start_node
from test_pool_idtokens import HELD_TOKEN, give_token, make_token

WAIT_S = 60
STARTD_CONFIG = "/etc/condor/config.d/99-execd-authz-policy.conf"
EXECD_NAME = "execd-authz.test"
READER = "authzreader"  # refused READ; an administrator from localhost
ADMIN = "authzadmin"  # an administrator from 10.0.0.0/8 only, so not from here
HOST_ADMIN = "authzhostadmin"  # an administrator from localhost (a name: its addresses)
POLICY = (
    f"DENY_READ_STARTD = {READER}@*\n"
    # the daemons (condor_reconfig -startd's) and root too, so that the test can undo it
    f"ALLOW_ADMINISTRATOR_STARTD = condor@* root@* {ADMIN}@*/10.0.0.0/8 "
    f"{READER}@*/LOCALHOST* {HOST_ADMIN}@*/localhost\n"  # a name pattern; a name
)


def as_token_holder(pool: harness.Pool, *argv: str) -> harness.Tool:
    """A tool of the token's holder that authenticates with it even for READ commands
    (which condor_startd answers unauthenticated otherwise; execd never does)."""
    return pool.tool("env", "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS",
                     "_CONDOR_SEC_CLIENT_AUTHENTICATION=REQUIRED", *argv,
                     user=harness.SUBMITTER)  # fmt: skip


def allowed(done: harness.Tool) -> bool:
    """The tool did it (exit 0); a failure must be a refusal, nothing else."""
    return done.returncode == 0


def startd_of(pool: harness.Pool) -> tuple[str, str]:
    """condor_startd's (name, address)."""
    rows = harness.wait_for("condor_startd's daemon ad", lambda: [
        row for row in pool.status_af("Name", "MyAddress", what="-startd")
        if row[0] != EXECD_NAME], WAIT_S)  # fmt: skip
    assert len(rows) == 1, rows
    return rows[0][0], rows[0][1]


def reads(name: str, address: str) -> dict[str, list[str]]:
    return {"status": ["condor_status", "-direct", address],
            "config_val": ["condor_config_val", "-addr", address, "UID_DOMAIN"],
            "history": ["condor_history", "-startd", "-name", f"slot1@{name}"]}  # fmt: skip


def administers(name: str, address: str) -> dict[str, list[str]]:
    return {"vacate": ["condor_vacate", "-addr", address],
            "drain": ["condor_drain", f"slot1@{name}"]}


def outcomes(pool: harness.Pool, token: str, name: str,
             address: str) -> dict[str, tuple[bool, str]]:  # fmt: skip
    """Each tool run by the holder of `token` (IDTOKENS only, its subject the identity
    on both execute points): allowed?, and what it printed."""
    give_token(pool, token)
    ran = {what: as_token_holder(pool, *argv)
           for what, argv in (reads(name, address) | administers(name, address)).items()}
    if allowed(ran["drain"]):  # undo it before the next identity's turn
        as_token_holder(pool, "condor_drain", "-cancel", f"slot1@{name}").check()
    return {what: (allowed(done), said(done.stderr, name)) for what, done in ran.items()}


def said(text: str, name: str) -> str:
    """A tool's message with the execute point's addresses and name taken out."""
    return re.sub(r"<[^<>]*>", "<address>", text).replace(f"slot1@{name}", "<slot>").strip()


def test_the_same_policy_allows_and_refuses_the_same_on_execd_and_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=True)
    startd, startd_address = startd_of(pool)
    key = pool.host_path("/etc/condor/passwords.d/POOL")
    try:
        with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
            node = start_node(pool, Path(tmp), f"NETWORK_HOSTNAME = {EXECD_NAME}\n"
                                               f"SEC_TOKEN_POOL_SIGNING_KEY_FILE = {key}\n")
            try:
                harness.wait_for("execd's daemon ad", lambda: EXECD_NAME in [
                    row[0] for row in pool.status_af("Name", what="-startd")], WAIT_S)
                pool.host_path(STARTD_CONFIG).write_text(POLICY)
                pool.tool("condor_reconfig", "-startd").check()
                harness.wait_for("condor_startd's policy", lambda: pool.tool(
                    "condor_config_val", "-startd", "DENY_READ_STARTD"
                ).stdout.strip() == f"{READER}@*", WAIT_S)  # fmt: skip
                node.config.write_text(node.config.read_text() + POLICY)
                assert node.proc is not None
                node.proc.send_signal(signal.SIGHUP)
                node.wait_for("reconfig_applied", timeout=WAIT_S)
                applied = node.wait_for("authz_policy_applied", timeout=WAIT_S)
                assert applied["hosts"] == ["localhost"], applied

                for identity, expected in (
                        (READER, {"status": False, "config_val": False, "history": False,
                                  "vacate": True, "drain": True}),
                        (ADMIN, {"status": True, "config_val": True, "history": True,
                                 "vacate": False, "drain": False}),
                        (HOST_ADMIN, {"status": True, "config_val": True, "history": True,
                                      "vacate": True, "drain": True})):  # fmt: skip
                    token = make_token(pool, identity=identity)
                    theirs = outcomes(pool, token, startd, startd_address)
                    ours = outcomes(pool, token, EXECD_NAME, node.address())
                    assert {k: v[0] for k, v in theirs.items()} == expected, theirs
                    assert {k: v[0] for k, v in ours.items()} == expected, (ours, theirs)
                    # the same messages too, but condor_config_val's: condor_startd
                    # closes before the tool's end of message, execd just after it
                    # ("Can't receive reply" for "Can't send end of message")
                    del ours["config_val"], theirs["config_val"]
                    assert ours == theirs
                reader_refused = node.wait_for("pool_command_refused", timeout=WAIT_S,
                                               authz_level="READ")  # fmt: skip
                assert reader_refused["user"].startswith(f"{READER}@"), reader_refused
                assert reader_refused["why"].endswith("(an entry of DENY_READ_STARTD)")
                admin_refused = node.wait_for("pool_command_refused", timeout=WAIT_S,
                                              authz_level="ADMINISTRATOR")  # fmt: skip
                assert admin_refused["user"].startswith(f"{ADMIN}@"), admin_refused
                assert admin_refused["why"].endswith("(ALLOW_ADMINISTRATOR_STARTD)")

                # a bad entry at a reload: refused naming the knob; the policy stays
                node.config.write_text(node.config.read_text() +
                                       f"DENY_READ_STARTD = {READER}@* */10.0.0.0/33\n")
                node.proc.send_signal(signal.SIGHUP)
                rejected = node.wait_for("reconfig_rejected", timeout=WAIT_S)
                assert "DENY_READ_STARTD: '*/10.0.0.0/33'" in rejected["error"], rejected
                after = outcomes(pool, make_token(pool, identity=READER), EXECD_NAME,
                                 node.address())  # fmt: skip
                assert not after["status"][0] and after["drain"][0], after
                assert node.running()
            finally:
                node.stop(signal.SIGQUIT)
    finally:
        pool.host_path(STARTD_CONFIG).unlink(missing_ok=True)
        pool.tool("condor_reconfig", "-startd")
        pool.host_path(HELD_TOKEN).unlink(missing_ok=True)  # the next tests' tools: FS
        harness.wait_for("condor_startd without the test's policy", lambda: pool.tool(
            "condor_config_val", "-startd", "DENY_READ_STARTD").stdout.strip() != f"{READER}@*",
            WAIT_S)  # fmt: skip
