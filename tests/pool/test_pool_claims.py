"""Claim ids on execd's command port, as a schedd would use them, with execd's own wire
client against a real `execd run` in the real pool: the claim id comes from execd's
private ad in the real collector (where only the negotiator and the pool's daemons may
read it). An offer claims once; a replay, a wrong secret, a forged session and an
unauthenticated command are refused and logged without any claim id's secret.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, pool_slots, start_node

from execd.claims.ids import parse_claim_id
from execd.daemon.client import ControlClient
from execd.errors import ProtocolError
from execd.wire.claim_messages import (
    ActivateClaim,
    RequestClaim,
    RequestClaimReply,
    decode_request_claim_reply,
    encode_activate_claim,
    encode_request_claim,
)
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import WireAd, from_values, to_classad
from execd.wire.collector import CollectorClient
from execd.wire.commands import Command, Reply
from execd.wire.reconnect import CaReply, LocateStarter, decode_ca_reply, encode_ca_request
from execd.wire.security import (
    ClientSecurity,
    SessionNotFoundError,
    claim_client_session,
    connect,
    start_command,
)
from execd.wire.sinful import parse_sinful

JOB = from_values({"MyType": "Job", "Owner": "nobody", "RequestCpus": 1, "RequestMemory": 64,
                   "Requirements": True})  # fmt: skip


@pytest.fixture
def node(pool: harness.Pool) -> Iterator[PoolNode]:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        started = start_node(pool, Path(tmp))
        try:
            yield started
        finally:
            # a claim held at shutdown must not keep execd from stopping
            assert started.stop(signal.SIGQUIT) == 0
            assert started.events()[-1]["event"] == "execd_stopped"
            harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


async def offered_claim(pool: harness.Pool) -> str:
    """The claim id execd's partitionable slot offers, from the collector's private ad."""
    client = CollectorClient(parse_sinful(pool.collector), ClientSecurity(timeout_s=10))
    try:
        (private,) = await client.query(Command.QUERY_STARTD_PVT_ADS, "Machine")
    finally:
        await client.close()
    return str(to_classad(private)["ClaimId"])


async def request_claim(address: str, claim_id: str, schedd: str = "<127.0.0.1:9>",
                        alive_interval: int = 300, job: WireAd = JOB, *,
                        reply_timeout_s: float | None = None,
                        preempting: tuple[str, ...] = ()) -> RequestClaimReply:
    """A schedd's REQUEST_CLAIM; its reply awaited `reply_timeout_s` (the channel's 10 s
    by default: a preempting claim's is answered only once it holds the slot);
    `preempting`: the d-slot claim ids of a pslot-preempting match."""
    execd = parse_sinful(address)
    session = claim_client_session(claim_session(claim_id), execd)
    channel = await connect(execd, timeout_s=10)
    try:
        await start_command(channel, execd, Command.REQUEST_CLAIM, ClientSecurity(timeout_s=10),
                            session=session)  # fmt: skip
        request = RequestClaim(claim_id, list(job.items()), schedd, alive_interval, preempting)
        await channel.send(encode_request_claim(channel.encoder(), request).payload())
        reply = await channel.recv(reply_timeout_s)
        return decode_request_claim_reply(channel.decoder(reply))
    finally:
        await channel.close()


def test_an_offer_claims_once_and_secrets_stay_out_of_the_log(pool: harness.Pool,
                                                              node: PoolNode) -> None:
    harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
    offer = asyncio.run(offered_claim(pool))
    secrets = [parse_claim_id(offer).secret]
    assert 'ShortVersion="' in offer  # the schedd knows which version it talks to

    # a wrong secret on the offer's session: the first encrypted packet fails
    forged = offer[:-64] + ("0" if offer[-64] != "0" else "1") + offer[-63:]
    with pytest.raises(ProtocolError):
        asyncio.run(request_claim(node.address(), forged))
    node.wait_for("wire_connection_dropped")

    reply = asyncio.run(request_claim(node.address(), offer))
    assert reply.status == Reply.OK
    (dslot,) = reply.claimed
    assert dict(dslot.ad)["Name"].startswith('"slot1_1@')
    assert reply.leftover is not None and reply.leftover.claim_id != offer
    assert int(dict(reply.leftover.ad)["Cpus"]) == 1
    secrets += [parse_claim_id(dslot.claim_id).secret,
                parse_claim_id(reply.leftover.claim_id).secret]
    node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Idle")

    # the same message again: the offer's session is gone, nothing more is carved
    with pytest.raises(SessionNotFoundError):
        asyncio.run(request_claim(node.address(), offer))
    # a claim id execd never made
    with pytest.raises(SessionNotFoundError):
        asyncio.run(request_claim(node.address(), forged.replace("#1#", "#999#")))

    # a raw REQUEST_CLAIM without the security handshake
    with socket.create_connection(("127.0.0.1", node.port())) as raw:
        payload = struct.pack(">q", Command.REQUEST_CLAIM)
        raw.sendall(b"\x01" + struct.pack(">i", len(payload)) + payload)
        assert raw.recv(100) == b""
    dropped = node.wait_for("wire_connection_dropped", reason="unauthenticated command 442 refused")
    assert dropped["peer"].startswith("127.0.0.1:")

    assert len(node.slots()) == 2  # one d-slot: the refusals carved nothing
    log = node.log.read_text()
    assert not [s for s in secrets if s in log]


def test_alive_to_a_schedd_that_does_not_know_the_claim_releases_it(pool: harness.Pool,
                                                                    node: PoolNode) -> None:
    harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
    schedd = (pool.local_dir / "spool" / ".schedd_address").read_text().splitlines()[0]
    offer = asyncio.run(offered_claim(pool))
    # claimed in the real schedd's name, which never heard of this claim; alive every 1 s
    reply = asyncio.run(request_claim(node.address(), offer, schedd=schedd, alive_interval=3))
    assert reply.status == Reply.OK
    node.wait_for("pool_claimed", slot="slot1_1", schedd=schedd)
    # execd's ALIVE reaches the real schedd, which answers SID_NOT_FOUND: claim released
    node.wait_for("alive_claim_unknown", slot="slot1_1", timeout=WAIT_S)
    node.wait_for("dynamic_slot_deleted", slot="slot1_1")
    harness.wait_for("the d-slot gone from the pool", lambda: len(pool_slots(pool)) == 1,
                     WAIT_S, 0.2)  # fmt: skip


def test_an_authenticated_peer_that_is_no_scheduler_may_not_claim(pool: harness.Pool,
                                                                  node: PoolNode) -> None:
    harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
    offer = asyncio.run(offered_claim(pool))

    async def claim_with_fs() -> None:
        execd = parse_sinful(node.address())
        channel = await connect(execd, timeout_s=10)
        try:  # a new FS-authenticated session, not the claim's: root is no pool scheduler
            await start_command(channel, execd, Command.REQUEST_CLAIM,
                                ClientSecurity(timeout_s=10))  # fmt: skip
            request = RequestClaim(offer, list(JOB.items()), "<127.0.0.1:9>", 300)
            await channel.send(encode_request_claim(channel.encoder(), request).payload())
            await channel.recv()
        finally:
            await channel.close()

    with pytest.raises(ProtocolError, match="DENIED"):
        asyncio.run(claim_with_fs())
    refused = node.wait_for("pool_command_refused", command=Command.REQUEST_CLAIM)
    assert refused["user"].startswith("root@") and refused["method"] == "FS"
    assert refused["authz_level"] == "DAEMON" and refused["why"].startswith(
        "DAEMON authorization policy contains no matching ALLOW entry for root@"), refused
    assert offer[-64:] not in node.log.read_text()
    assert len(node.slots()) == 1  # nothing claimed


async def claim_command(address: str, claim_id: str, command: int,
                        activate: dict[str, object] | None = None) -> int | None:  # fmt: skip
    """A claim-only command (or ACTIVATE_CLAIM with a job ad) on the claim's session;
    the reply int for ACTIVATE_CLAIM."""
    execd = parse_sinful(address)
    session = claim_client_session(claim_session(claim_id), execd)
    channel = await connect(execd, timeout_s=10)
    try:
        await start_command(channel, execd, command, ClientSecurity(timeout_s=10),
                            session=session)  # fmt: skip
        if activate is None:
            await channel.send(channel.encoder().put_string(claim_id).payload())
            return None
        job = list(from_values(activate).items())
        enc = encode_activate_claim(channel.encoder(), ActivateClaim(claim_id, 2, job))
        await channel.send(enc.payload())
        dec = channel.decoder(await channel.recv())
        return dec.get_int("ACTIVATE_CLAIM reply")
    finally:
        await channel.close()


def test_the_shadows_reconnect_reaches_execds_ca_cmd_handler(pool: harness.Pool,
                                                             node: PoolNode) -> None:
    """CA_CMD on a claim's session is served by `execd run` (the shadow's reconnect);
    a job execd does not run under that claim is not found, said without the secret."""
    harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
    reply = asyncio.run(request_claim(node.address(), asyncio.run(offered_claim(pool))))
    (dslot,) = reply.claimed

    async def locate() -> CaReply:
        execd = parse_sinful(node.address())
        channel = await connect(execd, timeout_s=10)
        try:
            await start_command(channel, execd, Command.CA_CMD, ClientSecurity(timeout_s=10),
                                session=claim_client_session(claim_session(dslot.claim_id),
                                                             execd))  # fmt: skip
            request = LocateStarter("vm#9.0#1", dslot.claim_id, "<127.0.0.1:9>")
            await channel.send(encode_ca_request(channel.encoder(), request).payload())
            return decode_ca_reply(channel.decoder(await channel.recv()))
        finally:
            await channel.close()

    answer = asyncio.run(locate())
    assert (answer.result, answer.ok) == ("Failure", False)
    assert "( vm#9.0#1 ) not found" in answer.error
    assert dslot.claim_id[-64:] not in answer.error
    logged = node.wait_for("ca_locate_starter", job="vm#9.0#1")
    assert logged["found"] is False and logged["session"] == dslot.claim_id.rsplit("#", 1)[0]
    assert dslot.claim_id[-64:] not in node.log.read_text()


def test_a_claim_execd_ends_is_released_to_its_schedd(pool: harness.Pool,
                                                      node: PoolNode) -> None:
    """HTCondor's startd tells the schedd when it ends a claim itself (Claim::vacate):
    execd sends the claim's schedd RELEASE_CLAIM when it vacates the claim; a claim the
    schedd released itself gets no notice back."""
    harness.wait_for("execd's slot", lambda: pool_slots(pool), WAIT_S)
    schedd = (pool.local_dir / "spool" / ".schedd_address").read_text().splitlines()[0]
    reply = asyncio.run(request_claim(node.address(), asyncio.run(offered_claim(pool)),
                                      schedd=schedd))  # fmt: skip
    (dslot,) = reply.claimed
    node.wait_for("pool_claimed", slot="slot1_1", schedd=schedd)
    with ControlClient(node.root / "state" / "log" / "execd.sock") as client:
        assert client.call("vacate", {"slot": "slot1_1"})["vacated"] == ["slot1_1"]
    node.wait_for("pool_claim_ended", slot="slot1_1", ended_by="execd", timeout=WAIT_S)
    # the real schedd never had this claim's session: the notice goes on an
    # authenticated one, and the schedd takes it
    sent = node.wait_for("pool_release_sent", slot="slot1_1", timeout=WAIT_S)
    assert sent["schedd"] == schedd
    assert dslot.claim_id[-64:] not in node.log.read_text()

    # released by its holder: no notice
    reply = asyncio.run(request_claim(node.address(), asyncio.run(offered_claim(pool)),
                                      schedd=schedd))  # fmt: skip
    (second,) = reply.claimed
    node.wait_for("pool_claimed", slot="slot1_1", schedd=schedd)
    asyncio.run(claim_command(node.address(), second.claim_id, Command.RELEASE_CLAIM))
    node.wait_for("pool_claim_ended", slot="slot1_1", ended_by="schedd", timeout=WAIT_S)
    assert [e["event"] for e in node.events()].count("pool_release_sent") == 1
