"""The job owner's security session: how condor_tail and condor_ssh_to_job reach a job.

The tool asks the schedd (GET_JOB_CONNECT_INFO); the schedd finds the starter through
the startd (CA_LOCATE_STARTER: execd answers its own address, execd.wire.shadow_link)
and sends it CREATE_JOB_OWNER_SEC_SESSION on the claim's session with one ad {ClaimId,
SessionInfo}. As condor_starter's createJobOwnerSecSession (starter.cpp), execd checks
that the claim id is the running job's own (only the schedd holding the claim has it;
any other is refused without an answer), makes a session with a fresh id and key whose
peer is the job's owner (the job ad's User), and answers {Version, Result = true,
ClaimId = "<session id>#[session info]<64 hex key>", StarterIpAddr}; the schedd hands it
to the tool, which resumes that session for STARTER_PEEK (execd.wire.job_peek) or
START_SSHD. The session serves that one job's owner commands (STARTER_PEEK and
START_SSHD, nothing else whatever its user: execd.daemon.pool_commands authorizes it)
and is forgotten when the job's conversation ends. condor_starter keeps every session
until then; execd keeps a job's SESSIONS_PER_JOB most recently used ones (each
condor_tail run makes one; a `condor_tail -f` uses its own every few seconds, so only
sessions left idle longest go). Its key is in no log: only the session id is logged.

START_SSHD on it starts an sshd in the job (execd.wire.job_sshd), as condor_starter
does for condor_ssh_to_job.
"""

from __future__ import annotations

import functools
import secrets
from collections import OrderedDict
from dataclasses import dataclass

from execd.claims.ids import SESSION_ATTRS
from execd.errors import RemoteProtocolError
from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.claim_session import ClaimSession
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad
from execd.wire.crypto import hkdf_key
from execd.wire.job_peek import serve_peek
from execd.wire.job_sshd import SshToJobConfig, serve_start_sshd
from execd.wire.security import CONDOR_VERSION
from execd.wire.server import Peer, ServerSecurity
from execd.wire.shadow_link import LIVE_LINKS, ShadowLink, ShadowLinks, session_id

log = get_logger("wire")
DUMMY_OWNER = "job-owner@submit-domain"  # condor_starter's name for a job without User
# Each condor_tail run makes a session; a job keeps the ones used last, the idlest go.
SESSIONS_PER_JOB = 64


@dataclass(frozen=True)
class OwnerSession:
    sid: str
    user: str
    link: ShadowLink


class OwnerSessions:
    """The job owners' sessions this daemon made, by session id."""

    def __init__(self, security: ServerSecurity, links: ShadowLinks = LIVE_LINKS) -> None:
        self.security = security
        self.links = links
        self._sessions: dict[str, OwnerSession] = {}
        self._by_job: dict[ShadowLink, OrderedDict[str, None]] = {}  # least recently used first

    def create(self, link: ShadowLink) -> str:
        """A new session for `link`'s job owner; the claim id that carries it."""
        sid, secret = secrets.token_hex(16), secrets.token_hex(32)
        user = link.owner or DUMMY_OWNER
        self.security.add_claim_session(
            ClaimSession(sid, hkdf_key(secret.encode("ascii")), {}), user=user)
        self._sessions[sid] = OwnerSession(sid, user, link)
        held = self._by_job.get(link)
        if held is None:  # one hook per job: its end forgets all its sessions
            held = self._by_job[link] = OrderedDict()
            link.on_close.append(functools.partial(self._forget_job, link))
        held[sid] = None
        while len(held) > SESSIONS_PER_JOB:
            self.forget(next(iter(held)))
        return f"{sid}#{SESSION_ATTRS}{secret}"

    def forget(self, sid: str) -> None:
        owner = self._sessions.pop(sid, None)
        if owner is not None:
            self.security.remove_session(sid)
            held = self._by_job.get(owner.link)
            if held is not None:
                held.pop(sid, None)

    def _forget_job(self, link: ShadowLink) -> None:
        for sid in list(self._by_job.pop(link, OrderedDict())):
            self.forget(sid)

    def is_owner_session(self, sid: str) -> bool:
        return sid in self._sessions

    def holder(self, peer: Peer) -> OwnerSession | None:
        """The session `peer` came on, if it is a job owner's and the peer its owner
        (the session counts as used now)."""
        owner = self._sessions.get(peer.sid)
        if owner is None or owner.user != peer.user:
            return None
        self._by_job[owner.link].move_to_end(owner.sid)
        return owner

    def __len__(self) -> int:
        return len(self._sessions)


async def serve_create_owner_session(channel: Channel, peer: Peer,
                                     sessions: OwnerSessions) -> None:  # fmt: skip
    """CREATE_JOB_OWNER_SEC_SESSION from the schedd that holds the job's claim."""
    request = to_classad(decode_ad(channel.decoder(await channel.recv()),
                                   "CREATE_JOB_OWNER_SEC_SESSION ad"))  # fmt: skip
    claim_id = request.get("ClaimId")
    link = sessions.links.by_claim(claim_id) if isinstance(claim_id, str) else None
    if link is None or link.closed:
        public = session_id(claim_id) if isinstance(claim_id, str) else "(none)"
        log.warning("job_owner_session_refused", peer=peer.address, user=peer.user,
                    claim=public, why="not the claim id of a running job")  # fmt: skip
        raise RemoteProtocolError("CREATE_JOB_OWNER_SEC_SESSION with a claim id of no "
                                  "running job")  # fmt: skip
    owner_claim = sessions.create(link)
    reply = from_values({"Version": CONDOR_VERSION, "Result": True, "ClaimId": owner_claim,
                         "StarterIpAddr": link.starter_address})  # fmt: skip
    await channel.send(encode_ad(channel.encoder(), reply).payload())
    log.info("job_owner_session_created", job=link.global_job_id, user=link.owner,
             session=owner_claim.split("#", 1)[0], peer=peer.address)  # fmt: skip


async def serve_owner_peek(channel: Channel, peer: Peer, sessions: OwnerSessions) -> None:
    """STARTER_PEEK on a job owner's session (authorized by OwnerSessions.holder)."""
    owner = sessions.holder(peer)
    if owner is None:  # the authorization hook let no other peer through
        raise RemoteProtocolError(f"{peer.user} may not peek at a job's files")
    link = owner.link
    await serve_peek(channel, link.files, finished=link.closed or link.job_done,
                     enabled=link.peek_enabled, job=link.global_job_id)  # fmt: skip


async def serve_owner_sshd(channel: Channel, peer: Peer, sessions: OwnerSessions,
                           config: SshToJobConfig) -> None:  # fmt: skip
    """START_SSHD on a job owner's session: condor_ssh_to_job into the running job."""
    owner = sessions.holder(peer)
    if owner is None:
        raise RemoteProtocolError(f"{peer.user} may not start an sshd for a job")
    link = owner.link
    await serve_start_sshd(channel, link.shell, job=link.global_job_id,
                           enabled=link.ssh_enabled, finished=link.closed or link.job_done,
                           suspended=link.suspended(), config=config)  # fmt: skip
