"""The startd commands a pool sends execd, each mapped onto the path the control
socket already has: claims go to the JobManager (request_claim, activate, release,
signal_job) and the policy engine behind it; vacate and drain call the control
socket's own `vacate`, `drain` and `cancel_drain` verbs. Nothing here decides policy.

Authorization (before any handler runs, in the wire server's hook): each command at
its HTCondor level, judged by ALLOW_<LEVEL>/DENY_<LEVEL> (execd.wire.authz_policy):
READ for queries, history and config values, ADMINISTRATOR for vacate, drain and the
daemon-core reconfig and shutdown commands (execd.daemon.pool_admin); claim commands
only from the holder of a claim id (the claim's own session, which only the
negotiator's match gives a schedd) or a DAEMON identity; a job owner's session
(condor_tail's) only STARTER_PEEK and START_SSHD, whatever user it names. Every refusal
is logged with the peer, the level and why, never a claim id's secret.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from execd import log
from execd.claims.ids import ClaimId
from execd.daemon.control import ControlError
from execd.daemon.pool_admin import DaemonCommands
from execd.daemon.pool_admin_verbs import AdminVerbs
from execd.daemon.pool_history import HistoryQueue
from execd.daemon.pool_job import CLAIM_DEACTIVATED, PoolJob
from execd.daemon.pool_pslot_preemption import PslotPreemption
from execd.daemon.pool_query import query_startd_ads
from execd.wire.authz_policy import peer_ip
from execd.wire.channel import Channel
from execd.wire.claim_messages import (
    RequestClaimReply,
    SlotClaim,
    decode_activate_claim,
    decode_claim_only,
    decode_request_claim,
    encode_deactivate_reply,
    encode_request_claim_reply,
)
from execd.wire.claim_session import MATCH_SESSION_USER
from execd.wire.classad_codec import to_classad
from execd.wire.commands import COMMAND_PERMISSION, Command, Reply
from execd.wire.job_owner_session import (
    OwnerSessions,
    serve_create_owner_session,
    serve_owner_peek,
    serve_owner_sshd,
)
from execd.wire.job_sshd import SshToJobConfig
from execd.wire.peer_names import PeerNames
from execd.wire.proxy_refresh import serve_proxy_refresh, serve_proxy_update
from execd.wire.server import Handler, Peer
from execd.wire.shadow_link import LIVE_LINKS, serve_ca_command

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember

logger = log.get_logger("pool")

CLAIM_COMMANDS = frozenset({
    Command.REQUEST_CLAIM, Command.ACTIVATE_CLAIM, Command.DEACTIVATE_CLAIM,
    Command.DEACTIVATE_CLAIM_FORCIBLY, Command.DEACTIVATE_CLAIM_JOB_DONE,
    Command.RELEASE_CLAIM, Command.SUSPEND_CLAIM, Command.CONTINUE_CLAIM, Command.CA_CMD,
    Command.CREATE_JOB_OWNER_SEC_SESSION, Command.DELEGATE_GSI_CRED_STARTER,
    Command.UPDATE_GSI_CRED,
})  # fmt: skip
# condor_tail and condor_ssh_to_job: only on a job owner's session (job_owner_session.py)
OWNER_COMMANDS = frozenset({Command.STARTER_PEEK, Command.START_SSHD})


def job_values(lines: list[tuple[str, str]] | Mapping[str, str]) -> dict[str, Any]:
    """A job ad from the wire as the dict the JobManager takes (literals as values)."""
    ad = to_classad(dict(lines))
    return {key: ad[key] for key in ad}


class PoolCommands:
    def __init__(self, member: PoolMember) -> None:
        self.member = member
        self.daemon = member.daemon
        self.pslots = PslotPreemption(member)
        self.history = HistoryQueue(lambda: member.daemon.settings)
        self.owners: OwnerSessions | None = None  # once the member has its server security
        self.peer_names = PeerNames()  # for host name patterns in ALLOW_/DENY_ lists

    def handlers(self) -> dict[int, Handler]:
        deactivate = self.deactivate_claim
        return {
            Command.REQUEST_CLAIM: self.request_claim,
            Command.ACTIVATE_CLAIM: self.activate_claim,
            Command.DEACTIVATE_CLAIM: deactivate,
            Command.DEACTIVATE_CLAIM_FORCIBLY: deactivate,
            Command.DEACTIVATE_CLAIM_JOB_DONE: deactivate,
            Command.RELEASE_CLAIM: self.release_claim,
            Command.SUSPEND_CLAIM: self.suspend_or_continue,
            Command.CONTINUE_CLAIM: self.suspend_or_continue,
            **AdminVerbs(self.daemon).handlers(),  # condor_vacate, condor_drain
            Command.CA_CMD: self.ca_command,
            Command.DELEGATE_GSI_CRED_STARTER: self.proxy_refresh,
            Command.UPDATE_GSI_CRED: self.proxy_update,
            Command.CREATE_JOB_OWNER_SEC_SESSION: self.owner_command,
            Command.STARTER_PEEK: self.owner_command,
            Command.START_SSHD: self.owner_command,
            Command.QUERY_STARTD_ADS: self.query,  # condor_who, condor_status -direct
            Command.GET_HISTORY: self.history.serve,  # condor_history -startd
            **DaemonCommands(self.daemon).handlers(),  # condor_reconfig, condor_config_val
        }

    async def authorize(self, command: int, peer: Peer) -> bool:
        """HTCondor's ALLOW_<LEVEL>/DENY_<LEVEL> for the command's level (the startd's
        registration, COMMAND_PERMISSION), with execd's own two rules before it: a job
        owner's session serves only the owner commands, and claim commands come from a
        claim id's session or a DAEMON identity (CA_CMD too, which HTCondor puts at WRITE).
        The peer's host names are looked up (off the loop) only when an entry is a host
        name pattern."""
        policy, ip = self.member.config.authz, peer_ip(peer.address)
        names = await self.peer_names.of(ip) if policy.wants_peer_names else ()
        return self.judge(command, peer, names)

    def judge(self, command: int, peer: Peer, names: tuple[str, ...] = ()) -> bool:
        """authorize's decision, the peer's confirmed host names given; logs a refusal."""
        owners = self.owners
        owner_session = owners is not None and owners.is_owner_session(peer.sid)
        level = "DAEMON" if command in CLAIM_COMMANDS else COMMAND_PERMISSION.get(command)
        if owners is not None and owner_session:  # whatever user it names
            allowed = command in OWNER_COMMANDS and owners.holder(peer) is not None
            why = "a job owner's session serves only its owner commands"
        elif command in OWNER_COMMANDS:
            allowed, why = False, "not the job owner's session"
        elif command in CLAIM_COMMANDS and peer.user == MATCH_SESSION_USER \
                and peer.method == "MATCH":  # a token naming that user is not one  # fmt: skip
            allowed, why = True, "a claim id's session"
        elif level is not None:
            verdict = self.member.config.authz.verify(level, peer.user, peer_ip(peer.address),
                                                      names)  # fmt: skip
            allowed, why = verdict.allowed, verdict.reason
        else:
            allowed, why = False, "not a command execd serves to the pool"
        if not allowed:
            logger.warning("pool_command_refused", peer=peer.address, user=peer.user,
                           method=peer.method, command=command, authz_level=level, why=why)
        return allowed

    # -- claims ---------------------------------------------------------------------------
    async def request_claim(self, channel: Channel, command: int, peer: Peer) -> None:
        member = self.member
        req = decode_request_claim(channel.decoder(await channel.recv()))
        slot = member.offer_for(req.claim_id)
        if slot is None:
            logger.warning("pool_claim_refused", peer=peer.address, user=peer.user,
                           session=peer.sid, why="not a claim id execd offers")  # fmt: skip
            await channel.send(encode_request_claim_reply(
                channel.encoder(), RequestClaimReply(Reply.NOT_OK)).payload())
            return
        stats = self.daemon.startd_stats
        stats.count("ClaimRequests")  # a claim id it offers (condor_startd's request_claim)
        partitionable = "_" not in slot and \
            int(slot.removeprefix("slot")) in self.daemon.node.slots.partitionable
        # a claimed slot's offer is its preempting claim id: the negotiator matched it for
        # a higher RANK, or for the submitter's better user priority (an equal RANK)
        preempting = slot in self.daemon.engine.slots and \
            self.daemon.engine.slots[slot].state.value == "Claimed"
        # the carve comes after any d-slots it preempts
        async with self.pslots.turn(slot, req.claim_id) as offered:
            if not offered:  # revoked while it waited: an unknown claim id now
                logger.warning("pool_claim_refused", peer=peer.address, user=peer.user,
                               session=peer.sid, slot=slot,
                               why="its claim id was revoked by an aborted claim request")
                await channel.send(encode_request_claim_reply(
                    channel.encoder(), RequestClaimReply(Reply.NOT_OK)).payload())
                return
            # ALLOW_PSLOT_PREEMPTION: the claims of d-slots to kill first
            if req.extra_claims and not await self.pslots.take_back(slot, req.extra_claims,
                                                                    peer):  # fmt: skip
                self.pslots.abort(slot)  # no answer: the connection closes
                return
            claim = member.new_claim_id() if partitionable else member.offers.pop(slot)
            try:
                result = self.daemon.jobs.request_claim(
                    slot, job_values(req.job_ad), claim=claim,
                    alive_interval=req.alive_interval or None, user_priority=preempting)
            except ControlError as exc:
                if partitionable:
                    member.forget_session(claim)
                else:
                    member.offers[slot] = claim
                logger.info("pool_claim_refused", slot=slot, user=peer.user, why=exc.message)
                await channel.send(encode_request_claim_reply(
                    channel.encoder(), RequestClaimReply(Reply.NOT_OK)).payload())
                return
        name = str(result["slot"])
        basis = result.get("preempts_for")
        if preempting and basis is not None:  # condor_startd counts each kind apart
            stats.count("JobPreemptions")
            stats.count("JobRankPreemptions" if basis == "rank" else "JobUserPrioPreemptions")
        if preempting and not await self._preempt(channel, name, claim, peer):
            return
        await member.job_attrs.note_client(claim, channel.peer)  # its ClientMachine
        # As condor_startd: ALIVE every lease/3, the lease being the job's
        # JobLeaseDuration, else MAX_CLAIM_ALIVES_MISSED x the schedd's ALIVE_INTERVAL.
        member.track(claim, name, req.schedd_address, int(result["lease"]))
        logger.info("pool_claimed", slot=name, claim=str(claim), schedd=req.schedd_address)
        if partitionable:
            member.replace_offer(slot)
            reply = RequestClaimReply(
                Reply.OK,
                claimed=(SlotClaim(claim.full(), list(member.public_ad(name).items())),),
                leftover=SlotClaim(member.offers[slot].full(),
                                   list(member.public_ad(slot).items())),
            )  # fmt: skip
        else:
            reply = RequestClaimReply(Reply.OK)
        await channel.send(encode_request_claim_reply(channel.encoder(), reply).payload())
        member.changed()

    async def _preempt(self, channel: Channel, slot: str, claim: ClaimId, peer: Peer) -> bool:
        """The engine took `claim` as `slot`'s preempting claim (for rank or priority): the
        current claim retires and is vacated. As HTCondor's startd does, the schedd's
        REQUEST_CLAIM is answered only once the new claim holds the slot (it would
        activate at once); NOT_OK if the preempting claim went away meanwhile. The schedd
        gives up by closing the request's connection (its REQUEST_CLAIM_TIMEOUT, 30
        minutes by default): the claim is withdrawn then, as condor_startd's
        requestClaimSockClosed removes it, and the retiring job unretires."""
        logger.info("pool_claim_preempting", slot=slot, claim=str(claim), user=peer.user)
        self.member.changed()
        # the schedd sends nothing more on this connection: a read ends only when it closes
        given_up = asyncio.ensure_future(channel.reader.read(1))
        try:
            if await self.member.wait_for_takeover(slot, claim, given_up):
                return True
        finally:
            given_up.cancel()
        closed = given_up.done() and not given_up.cancelled()
        logger.warning("pool_claim_refused", slot=slot, user=peer.user, session=peer.sid,
                       why="the schedd closed its claim request" if closed else
                       "the preempting claim went away before the slot was vacated")  # fmt: skip
        if claim.full() in self.daemon.jobs.claims:
            try:
                self.daemon.jobs.release(claim.full())
            except ControlError as exc:
                logger.info("pool_release_refused", slot=slot, why=exc.message)
        self.member.forget_session(claim)
        if not closed:
            await channel.send(encode_request_claim_reply(
                channel.encoder(), RequestClaimReply(Reply.NOT_OK)).payload())
        return False

    async def activate_claim(self, channel: Channel, command: int, peer: Peer) -> None:
        from execd.daemon.pool_conversation import published_slot_ad, serve_shadow  # noqa: PLC0415

        request = decode_activate_claim(channel.decoder(await channel.recv()))
        if self.daemon.stopping == "restart":  # its calls would not be quiesced: the
            # shadow asks again 6 times in ~20 s (1,2,3,4,5,5 s; remoteresource.cpp since
            # v25.6.1), so the next image serves it; after that the job goes back to idle
            logger.info("pool_activation_deferred", peer=peer.address, why="restarting")
            await channel.send(channel.encoder().put_int(Reply.TRY_AGAIN).payload())
            return
        job = job_values(request.job_ad)
        runner = PoolJob(self.daemon.jobs, request.claim_id)
        try:
            slot, claim = self.daemon.jobs.lookup(request.claim_id)
            self.daemon.startd_stats.count("ActivationRequests")
            published = published_slot_ad(self.member, slot)  # as the starter starts
            runner.activate(job, request.job_ad)
        except ControlError as exc:
            logger.warning("pool_activation_refused", peer=peer.address, session=peer.sid,
                           why=exc.message)  # fmt: skip
            await channel.send(channel.encoder().put_int(Reply.NOT_OK).payload())
            return
        self.daemon.startd_stats.count("JobStarts")  # condor_startd's beginActivation
        logger.info("pool_activated", slot=slot, claim=str(claim),
                    job=str(job.get("GlobalJobId", "")))  # fmt: skip
        try:
            await channel.send(channel.encoder().put_int(Reply.OK).payload())
            self.member.changed()
            await serve_shadow(self.member, channel, claim, job, runner, published=published)
        finally:
            runner.close()

    async def deactivate_claim(self, channel: Channel, command: int, peer: Peer) -> None:
        claim_id = decode_claim_only(channel.decoder(await channel.recv()), Command(command).name)
        try:
            slot, claim = self.daemon.jobs.lookup(claim_id)
        except ControlError:
            logger.warning("pool_deactivate_refused", peer=peer.address, session=peer.sid,
                           why="unknown or stale claim id")  # fmt: skip
            await channel.send(encode_deactivate_reply(channel.encoder(), False).payload())
            return
        job = self.daemon.jobs.running.get(slot)
        if job is not None and not job.done.is_set():
            # The policy engine's path (a suspended job is resumed first); the starter's
            # report says it was killed, and the shadow's conversation says JOB_SHOULD_REQUEUE.
            verb = "deactivate_forcefully" if command == Command.DEACTIVATE_CLAIM_FORCIBLY \
                else "deactivate"
            # why, for the job's exit update (VacateReason*), as condor_startd tells its
            # starter (Claim::deactivateClaim)
            job.vacate_reason = job.vacate_reason or (
                "Claim deactivated" if verb == "deactivate" else "Claim deactivated forcibly",
                CLAIM_DEACTIVATED, 0)  # fmt: skip
            try:
                self.daemon.jobs.signal_job(claim_id, verb)
            except ControlError as exc:  # already being evicted, or not running any more
                logger.info("pool_deactivate_not_applied", slot=slot, why=exc.message)
        logger.info("pool_deactivated", slot=slot, claim=str(claim),
                    how=Command(command).name)  # fmt: skip
        state = self.daemon.engine.slots[slot].state.value if slot in self.daemon.engine.slots \
            else ""
        reply = encode_deactivate_reply(channel.encoder(), state == "Claimed")
        await channel.send(reply.payload())

    async def query(self, channel: Channel, command: int, peer: Peer) -> None:
        await query_startd_ads(self.member, channel, command, peer)

    async def ca_command(self, channel: Channel, command: int, peer: Peer) -> None:
        """The shadow's reconnect (execd/wire/shadow_link.py): execd is the starter too."""

        await serve_ca_command(channel, peer, schedd_moved=self.member.schedd_moved)

    async def proxy_refresh(self, channel: Channel, command: int, peer: Peer) -> None:
        """The shadow's renewed X509 proxy for a running job (execd/wire/proxy_refresh.py)."""
        await serve_proxy_refresh(channel, peer)

    async def proxy_update(self, channel: Channel, command: int, peer: Peer) -> None:
        """The shadow's renewed X509 proxy as a file (execd/wire/proxy_refresh.py)."""
        await serve_proxy_update(channel, peer)

    async def owner_command(self, channel: Channel, command: int, peer: Peer) -> None:
        """condor_tail / condor_ssh_to_job: the job owner's session, then its use."""
        if self.owners is None:
            self.owners = OwnerSessions(self.member.security)
        if command == Command.CREATE_JOB_OWNER_SEC_SESSION:
            await serve_create_owner_session(channel, peer, self.owners)
        elif command == Command.STARTER_PEEK:
            await serve_owner_peek(channel, peer, self.owners)
        else:
            config = SshToJobConfig.from_settings(self.member.daemon.settings)
            await serve_owner_sshd(channel, peer, self.owners, config)

    async def release_claim(self, channel: Channel, command: int, peer: Peer) -> None:
        claim_id = decode_claim_only(channel.decoder(await channel.recv()), "RELEASE_CLAIM")
        try:
            if claim_id in self.member.claims:  # the schedd ended it: no notice back
                self.member.closed_by_schedd.add(claim_id)
            result = self.daemon.jobs.release(claim_id)
        except ControlError as exc:
            self.member.closed_by_schedd.discard(claim_id)
            logger.warning("pool_release_refused", peer=peer.address, session=peer.sid,
                           why=exc.message)  # fmt: skip
            return
        logger.info("pool_released", slot=result["released"])
        link = LIVE_LINKS.by_claim(claim_id)
        if link is not None:  # a conversation waiting for its shadow: none will come
            link.claim_released()
        self.member.changed()

    async def suspend_or_continue(self, channel: Channel, command: int, peer: Peer) -> None:
        """SUSPEND_CLAIM / CONTINUE_CLAIM: the engine's claim-holder suspension."""
        what = Command(command).name
        claim_id = decode_claim_only(channel.decoder(await channel.recv()), what)
        verb = "suspend" if command == Command.SUSPEND_CLAIM else "continue"
        try:  # the local socket's path: the store records who suspended the job
            result = self.daemon.jobs.signal_job(claim_id, verb)
        except ControlError as exc:
            logger.warning("pool_command_not_applied", peer=peer.address, session=peer.sid,
                           command=what, why=exc.message)  # fmt: skip
            return
        logger.info("pool_claim_" + ("suspended" if verb == "suspend" else "continued"),
                    slot=result.get("slot"))  # fmt: skip
        self.member.changed()
