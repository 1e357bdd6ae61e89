"""The real negotiator, schedd and shadow claim a slot execd advertises, over execd's own
wire code: the schedd's REQUEST_CLAIM and the shadow's ACTIVATE_CLAIM reach execd's
CommandServer on the claim id's own security session, and decode.

No policy engine is behind these handlers yet (pool mode is not in the daemon): the
claim is accepted and the activation refused, so the job goes back to idle; the test
then removes the job, the slot ad and the server.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pool_harness as harness
from static_slot_server import advertised_static_slot

from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.wire.channel import Channel
from execd.wire.claim_messages import (
    RequestClaimReply,
    decode_activate_claim,
    decode_request_claim,
    encode_request_claim_reply,
)
from execd.wire.claim_session import MATCH_SESSION_USER
from execd.wire.commands import Command, Reply
from execd.wire.schedd_client import send_alive
from execd.wire.security import ClientSecurity, SessionNotFoundError
from execd.wire.server import Peer, ServerSecurity
from execd.wire.sinful import parse_sinful

ECHO_JOB = """\
executable = /bin/echo
arguments = hi
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
queue
"""
WAIT_S = 60


def test_real_schedd_and_shadow_claim_execds_slot(pool: harness.Pool) -> None:
    events: list[tuple[str, Any]] = []
    schedd_address: list[str] = []
    arrived: dict[str, asyncio.Event] = {}

    def note(what: str, value: Any) -> None:
        events.append((what, value))
        arrived.setdefault(what, asyncio.Event()).set()

    async def request_claim(channel: Channel, command: int, peer: Peer) -> None:
        req = decode_request_claim(channel.decoder(await channel.recv()))
        schedd_address.append(req.schedd_address)
        note("REQUEST_CLAIM", (peer.user, dict(req.job_ad), req.claim_id, req.alive_interval))
        reply = encode_request_claim_reply(channel.encoder(), RequestClaimReply(Reply.OK))
        await channel.send(reply.payload())

    async def activate_claim(channel: Channel, command: int, peer: Peer) -> None:
        act = decode_activate_claim(channel.decoder(await channel.recv()))
        note("ACTIVATE_CLAIM", (peer.user, act.starter_version, dict(act.job_ad)))
        # While the shadow waits, the schedd holds the claim: execd's keep-alive to it
        # (and one for a claim the schedd never had).
        schedd = parse_sinful(schedd_address[0])
        note("ALIVE", await send_alive(schedd, act.claim_id, ClientSecurity(timeout_s=10)))
        stranger = ClaimIdFactory(schedd_address[0], 1).new().full()
        try:
            await send_alive(schedd, stranger, ClientSecurity(timeout_s=10), fallback=False)
            note("ALIVE_STRANGER", "answered")
        except SessionNotFoundError:
            note("ALIVE_STRANGER", "SID_NOT_FOUND")
        await channel.send(channel.encoder().put_int(Reply.NOT_OK).payload())

    async def claim_ended(channel: Channel, command: int, peer: Peer) -> None:
        note("ENDED", command)

    async def wait(what: str) -> None:
        await asyncio.wait_for(arrived.setdefault(what, asyncio.Event()).wait(), WAIT_S)

    async def run() -> int:
        security = ServerSecurity(domain="execd.test", timeout_s=10)
        handlers = {Command.REQUEST_CLAIM: request_claim, Command.ACTIVATE_CLAIM: activate_claim}
        for ending in (Command.DEACTIVATE_CLAIM, Command.DEACTIVATE_CLAIM_FORCIBLY,
                       Command.RELEASE_CLAIM):  # fmt: skip
            handlers[ending] = claim_ended
        async with advertised_static_slot(pool, handlers, security) as (claim, _name):
            return await claimed(claim)

    async def claimed(claim: ClaimId) -> int:
        job = None
        try:
            job = await asyncio.to_thread(pool.submit, ECHO_JOB)
            await wait("REQUEST_CLAIM")
            await wait("ACTIVATE_CLAIM")
            await wait("ENDED")
            user, job_ad, claim_text, alive = dict(events)["REQUEST_CLAIM"]
            assert user == MATCH_SESSION_USER and claim_text == claim.full()
            assert job_ad["Owner"] == f'"{harness.SUBMITTER}"' and alive > 0
            assert int(job_ad["ClusterId"]) == job.cluster
            user, version, activated = dict(events)["ACTIVATE_CLAIM"]
            assert user == MATCH_SESSION_USER and version >= 1
            assert activated["Cmd"] == '"/bin/echo"'
            interval = await asyncio.to_thread(
                pool.tool, "condor_config_val", "ALIVE_INTERVAL")
            assert dict(events)["ALIVE"] == int(interval.check().stdout.strip() or 300)
            assert dict(events)["ALIVE_STRANGER"] == "SID_NOT_FOUND"
            return job.cluster
        finally:
            if job is not None:
                await asyncio.to_thread(pool.tool, "condor_rm", str(job.cluster),
                                        user=harness.SUBMITTER)  # fmt: skip

    cluster = asyncio.run(run())
    harness.wait_for("execd's slot gone", lambda: not pool.status("-slots"), 30, 0.2)
    assert cluster > 0
