"""IDTOKENS on `execd run`'s command port, judged by the pool's own tools.

The tools run as the non-root submitter with SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS
and a token from the pool's `condor_token_create` in their token directory, so the
only way in is the token: execd checks it against the pool's POOL signing key (the
chroot's key file), maps it to the token's subject and authorizes that identity with
EXECD_POOL_ADMINISTRATORS. A token with an altered signature, an expired one, one
limited to READ and one SEC_TOKEN_REVOCATION_EXPR revokes are refused, each logged with
its reason and no secret.
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pytest
from pool_node import SLEEP_JOB, PoolNode, pool_knob, start_node, wait_pool

ADMIN = "tokenadmin"
REVOKED = "revokedadmin"  # an administrator too, but SEC_TOKEN_REVOCATION_EXPR names it
HELD_TOKEN = f"/home/{harness.SUBMITTER}/.condor/tokens.d/token"


@pytest.fixture
def token_node(pool: harness.Pool) -> Iterator[PoolNode]:
    domain = pool_knob(pool, "UID_DOMAIN")
    key = pool.host_path("/etc/condor/passwords.d/POOL")
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        try:
            yield start_node(pool, Path(tmp), f"SEC_TOKEN_POOL_SIGNING_KEY_FILE = {key}\n"
                                              f"EXECD_POOL_ADMINISTRATORS = {ADMIN}@{domain} "
                                              f"{REVOKED}@{domain}\n"
                                              "SEC_TOKEN_REVOCATION_EXPR = "
                                              f'sub =?= "{REVOKED}@{domain}"\n')  # fmt: skip
        finally:  # the submitter's other tools must not find these tokens
            pool.host_path(HELD_TOKEN).unlink(missing_ok=True)


def make_token(pool: harness.Pool, *args: str, identity: str = ADMIN) -> str:
    domain = pool_knob(pool, "UID_DOMAIN")
    return pool.tool("condor_token_create", "-identity", f"{identity}@{domain}", *args
                     ).check().stdout.strip()  # fmt: skip


def give_token(pool: harness.Pool, token: str) -> None:
    """The submitter's only token (its ~/.condor/tokens.d, which HTCondor's tools read)."""
    uid, gid = pool._chroot_ids(harness.SUBMITTER)
    directory = pool.host_path(f"/home/{harness.SUBMITTER}/.condor/tokens.d")
    for path in (directory.parent, directory):
        path.mkdir(mode=0o700, exist_ok=True)
        harness.os.chown(path, uid, gid)
    held = pool.host_path(HELD_TOKEN)
    held.write_text(token + "\n")
    held.chmod(0o600)
    harness.os.chown(held, uid, gid)


def as_token_holder(pool: harness.Pool, *argv: str) -> harness.Tool:
    return pool.tool("env", "_CONDOR_SEC_CLIENT_AUTHENTICATION_METHODS=IDTOKENS",
                     "_CONDOR_TOOL_DEBUG=D_SECURITY", *argv, user=harness.SUBMITTER)  # fmt: skip


def ping_is_refused(pool: harness.Pool, node: PoolNode, token: str, reason: str) -> None:
    """condor_ping with `token` as the holder's only token fails, and execd drops the
    connection next, saying `reason`."""
    give_token(pool, token)
    ping = as_token_holder(pool, "condor_ping", "-addr", node.address(), "DRAIN_JOBS")
    assert ping.returncode != 0
    dropped = node.wait_for("wire_connection_dropped")
    assert reason in dropped["reason"], dropped


def altered_signature(token: str) -> str:
    head, body, sig = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
    raw[0] ^= 1
    return ".".join([head, body, base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")])


def test_condor_ping_and_drain_with_a_token_act_as_its_identity(pool: harness.Pool,
                                                                token_node: PoolNode) -> None:
    (name,) = wait_pool(pool, "execd's slot", lambda s: s)
    domain = pool_knob(pool, "UID_DOMAIN")
    token = make_token(pool)
    give_token(pool, token)
    ping = as_token_holder(pool, "condor_ping", "-addr", token_node.address(), "-verbose",
                           "DRAIN_JOBS")  # fmt: skip
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for expected in ("Authorized:                  TRUE",
                     "Authenticated using:         IDTOKENS",
                     f"Remote Mapping:              {ADMIN}@{domain}"):  # fmt: skip
        assert expected in ping.stdout, ping.stdout

    as_token_holder(pool, "condor_drain", "-reason", "token drain", name).check()
    drained = token_node.wait_for("pool_drain", reason="token drain")
    assert drained["user"] == f"{ADMIN}@{domain}"
    wait_pool(pool, "Drained in condor_status", lambda s: s[name]["State"] == "Drained")
    as_token_holder(pool, "condor_drain", "-cancel", name).check()
    token_node.wait_for("pool_drain_cancelled", user=f"{ADMIN}@{domain}")
    assert token not in token_node.log.read_text()


def test_bad_expired_and_read_only_tokens_are_refused(pool: harness.Pool,
                                                      token_node: PoolNode) -> None:
    (name,) = wait_pool(pool, "execd's slot", lambda s: s)
    bad = altered_signature(make_token(pool))
    ping_is_refused(pool, token_node, bad, "not signed by this pool's key (bad signature)")

    short = make_token(pool, "-lifetime", "1")
    payload = short.split(".")[1]
    expires = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"]
    # the token's own clock: it is refused once its exp has passed
    harness.wait_for("the token to expire", lambda: time.time() > expires + 1, 10, 0.2)
    ping_is_refused(pool, token_node, short, "token expired")

    read_only = make_token(pool, "-authz", "READ")
    give_token(pool, read_only)
    drain = as_token_holder(pool, "condor_drain", name)
    assert drain.returncode != 0
    refused = token_node.wait_for("wire_command_refused", command=512)
    assert refused["why"] == "token limited to READ" and refused["method"] == "IDTOKENS"
    dropped = token_node.wait_for("wire_connection_dropped")
    assert dropped["reason"].endswith("is not authorized for command 512"), dropped
    assert token_node.slots()[name]["State"] == "Unclaimed"

    revoked = make_token(pool, identity=REVOKED)
    ping_is_refused(pool, token_node, revoked, "token is revoked by SEC_TOKEN_REVOCATION_EXPR")

    log = token_node.log.read_text()
    assert not [t for t in (bad, short, read_only, revoked) if t.split(".")[2] in log]
    assert token_node.running()




def test_an_idtokens_only_pool_claims_and_activates(idtokens_pool: harness.Pool) -> None:
    """SEC_DEFAULT_AUTHENTICATION_METHODS = IDTOKENS and no claim-id sessions: the real
    schedd authenticates REQUEST_CLAIM and ACTIVATE_CLAIM to execd with IDTOKENS; execd
    advertises with its own token."""
    pool = idtokens_pool
    domain = pool_knob(pool, "UID_DOMAIN")
    key = pool.host_path("/etc/condor/passwords.d/POOL")
    token = pool.host_path(harness.DAEMON_TOKEN)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), f"SEC_TOKEN_POOL_SIGNING_KEY_FILE = {key}\n"
                                           f"EXECD_POOL_TOKEN_FILE = {token}\n")  # fmt: skip
        (ad,) = wait_pool(pool, "execd's slot", lambda s: s).values()
        assert ad["AuthenticationMethod"] == "IDTOKENS"
        job = pool.submit(SLEEP_JOB)
        try:
            claim = node.wait_for("wire_command", command=442, timeout=60)
            assert claim["method"] == "IDTOKENS" and claim["authorized"] is True
            assert claim["user"] in (f"condor@{domain}", "condor@password")
            node.wait_for("pool_claimed", slot="slot1_1")
            activate = node.wait_for("wire_command", command=444, timeout=60)
            assert activate["method"] == "IDTOKENS" and activate["authorized"] is True
            node.wait_for("pool_activated", slot="slot1_1")
            node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Busy")
        finally:
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
        assert node.stop() == 0
