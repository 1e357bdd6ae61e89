"""The syscall connection of a running job, which the shadow's reconnect replaces.

A shadow that goes away (its schedd restarted) does not end the job: as HTCondor's
starter (jic_shadow.cpp syscall_sock_disconnect), a call that finds the connection
lost waits for the shadow's CA_RECONNECT_JOB for what remains of the job lease
(JobLeaseDuration, counted from the last call that got through); the reconnect's
connection becomes the syscall connection and the call is made again on it. A lease
that runs out is a ProtocolError, and the job dies with the conversation. A job ad
without JobLeaseDuration gets no wait.

`ShadowLinks` is the process's table of running jobs by claim; `serve_ca_command` is
the CA_CMD handler that finds the starter (CA_LOCATE_STARTER) and hands a new
connection to the job (CA_RECONNECT_JOB). Claim ids stay out of the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from execd.errors import ProtocolError, RemoteProtocolError
from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.job_peek import JobFiles
from execd.wire.reconnect import (
    FAILURE,
    INVALID_REQUEST,
    SUCCESS,
    LocateStarter,
    ReconnectJob,
    decode_ca_request,
    encode_ca_reply,
)
from execd.wire.server import Peer
from execd.wire.shadow_syscalls import MessageChannel

if TYPE_CHECKING:
    from execd.wire.proxy_refresh import ProxyTarget
    from execd.wire.ssh_sessions import JobShell

log = get_logger("wire")
# How long a reconnect's connection, its command cancelled, waits for the job's
# conversation (cancelled with it) to hand it over or end before it is closed.
HANDOVER_WAIT_S = 5.0


def session_id(claim_id: str) -> str:
    """A claim id's public part: its security session's id (no secret)."""
    return claim_id.rpartition("#")[0]


class ShadowLink:
    """One running job's connection to its shadow: current, lost, replaced."""

    def __init__(self, channel: MessageChannel, *, claim_id: str, global_job_id: str,
                 lease_s: float | None, starter_ad: WireAd,
                 starter_address: str) -> None:  # fmt: skip
        self.channel = channel
        self._claim_id = claim_id
        self.session_id = session_id(claim_id)
        self.global_job_id = global_job_id
        self.lease_s = lease_s
        self.starter_ad = starter_ad
        self.starter_address = starter_address
        self.transfer: tuple[str, str] | None = None  # the latest shadow's socket and key
        self.last_rpc = time.monotonic()
        self.closed = False
        # Set by the job's syscalls: move to an offered connection now (the new
        # shadow's sessions first, as HTCondor's starter does in its reconnect handler).
        self.adopt: Callable[[], Awaitable[None]] | None = None
        # Set by the job's syscalls: stop new calls, let the one under way finish (a
        # restart in place is coming); whether the connection is then between messages.
        self.quiesce: Callable[[float], Awaitable[bool]] | None = None
        self.disconnected = asyncio.Event()  # set while a call waits for a reconnect
        # Since when the job is without a connection (from the last answered call, as
        # the lease counts: a shadow that stopped answering is noticed only timeout_s
        # later), and the earlier such spans (start, end).
        self._down_since: float | None = None
        self._downs: list[tuple[float, float]] = []
        self._offered: MessageChannel | None = None
        # Connections taken after the first (reconnects): what the shadow opened for the
        # job (streamed output's descriptors) is gone with the old one's shadow side.
        self.connections = 0
        self._arrived = asyncio.Event()
        self._released = asyncio.Event()  # the schedd released the claim: no shadow comes
        self._ended = asyncio.Event()  # the conversation ended (close): nobody waits on
        self._held: dict[int, asyncio.Event] = {}  # reconnect connections still in use
        self.owner = ""  # the job ad's User: whom a job owner's session is made for
        self.files: JobFiles | None = None  # what condor_tail may read, once the job runs
        self.proxy: ProxyTarget | None = None  # its X509 proxy in the sandbox, to refresh
        # How the job came: with file transfer (else a proxy update is declined, 2), and
        # its proxy's name in the sandbox (None: it has none, 487 gets no answer).
        self.file_transfer = False
        self.proxy_name: str | None = None
        self.job_done = False  # the job has exited (its output may still be on its way)
        self.peek_enabled: Callable[[], bool] = lambda: True  # ENABLE_PEEK_JOB for this job
        # condor_ssh_to_job (execd.wire.job_sshd): the running job's user, sandbox,
        # environment and the sshd's cgroup; ENABLE_SSH_TO_JOB; is the job suspended?
        self.shell: JobShell | None = None
        self.ssh_enabled: Callable[[], bool] = lambda: True
        self.suspended: Callable[[], bool] = lambda: False
        self.on_close: list[Callable[[], None]] = []  # e.g. forget its owner sessions

    def claim_matches(self, claim_id: str) -> bool:
        return hmac.compare_digest(self._claim_id.encode(), claim_id.encode())

    async def job_exited(self) -> None:
        """The job has exited (called before its streamed output's drain): condor_tail
        is refused from now on, as condor_starter, and its ssh sessions end (their
        directories removed) before any of its output goes back."""
        self.job_done = True
        if self.shell is not None:
            await self.shell.close()

    def rpc_done(self) -> None:
        self.last_rpc = time.monotonic()

    async def offer(self, channel: MessageChannel, request: ReconnectJob) -> None:
        """A reconnect's connection (Success already sent) for the job's next call;
        returns once the job no longer uses it, so that its handler may close it."""
        if self.closed:
            return
        released = asyncio.Event()
        self._held[id(channel)] = released
        if self._offered is not None:  # a second reconnect before the first was used
            self._release(self._offered)
        self._offered = channel
        if request.transfer_socket and request.transfer_key:
            self.transfer = (request.transfer_socket, request.transfer_key)
        self._arrived.set()
        try:
            # A call waiting on the old connection fails now and moves to this one.
            await _close(self.channel)
            if self.adopt is not None:
                await self.adopt()  # (during a restart's quiesce: held at its gate)
            await released.wait()
        except asyncio.CancelledError:
            # The daemon stops: its command server cancels every connection's task at
            # once, the job's conversation's too. Closed now, this connection could not go
            # to the next image (a restart in place's hand_over runs in the conversation's
            # task, maybe after this one; a reconnect not adopted yet is handed over
            # itself): it closes once the conversation let it go.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), HANDOVER_WAIT_S)
            raise

    def take_offered(self) -> MessageChannel | None:
        """The connection a reconnect brought, made current (None if there is none)."""
        fresh, self._offered = self._offered, None
        if fresh is None:
            return None
        self._arrived.clear()
        self._set_up()
        self._release(self.channel)
        self.channel = fresh
        self.connections += 1
        self.rpc_done()
        log.info("shadow_reconnected", job=self.global_job_id)
        return fresh

    @property
    def offered(self) -> bool:
        """A reconnect's connection waits to be taken by the next call."""
        return self._offered is not None

    def lost(self, reason: Exception) -> None:
        """The connection failed under a call that is not sent again: the calls that
        come after it wait for a reconnect (wait_for_reconnect)."""
        if not self.disconnected.is_set():
            log.warning("shadow_disconnected", job=self.global_job_id, reason=str(reason))
        self._set_down()

    async def wait_for_reconnect(self, lost: Exception) -> None:
        """The connection failed: wait for a reconnect for what is left of the lease;
        ProtocolError when it runs out (or there is no lease)."""
        if self._offered is not None:
            return
        remaining = 0.0 if self.lease_s is None else \
            self.last_rpc + self.lease_s - time.monotonic()  # fmt: skip
        log.warning("shadow_disconnected", job=self.global_job_id, reason=str(lost),
                    wait_s=round(max(remaining, 0.0), 1))  # fmt: skip
        self._set_down()
        try:
            if self.closed:
                raise self._ended_error(lost)
            if remaining <= 0:
                raise TimeoutError
            # A call that outlived its conversation (shielded, its caller cancelled)
            # waits no longer than the conversation: close() ends the wait.
            waits = [asyncio.ensure_future(event.wait())
                     for event in (self._arrived, self._released, self._ended)]  # fmt: skip
            try:
                await asyncio.wait_for(asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED),
                                       remaining)  # fmt: skip
            finally:
                for wait in waits:
                    wait.cancel()
            if self._offered is None and self._ended.is_set():
                raise self._ended_error(lost)
            if self._offered is None and self._released.is_set():
                log.info("shadow_wait_ended", job=self.global_job_id,
                         why="the schedd released the claim")  # fmt: skip
                raise ProtocolError(f"the schedd released the claim of {self.global_job_id}: "
                                    f"no shadow reconnects ({lost})")  # fmt: skip
        except TimeoutError:
            log.warning("shadow_lease_expired", job=self.global_job_id, lease_s=self.lease_s)
            raise ProtocolError(f"the shadow of {self.global_job_id} did not reconnect within "
                                f"the job lease ({self.lease_s} s): {lost}") from None  # fmt: skip

    def _ended_error(self, lost: Exception) -> ProtocolError:
        return ProtocolError(f"the conversation of {self.global_job_id} ended: no shadow "
                             f"reconnects to it ({lost})")  # fmt: skip

    def down_s(self, since: float = 0.0) -> float:
        """How long the job has been without a connection after `since` (monotonic
        time), up to now: from the last call the shadow answered before a loss to the
        reconnect's taken. What a wait measured in the job's time leaves out
        (streamed output's drain)."""
        now = time.monotonic()
        spans = [*self._downs] + ([] if self._down_since is None else [(self._down_since, now)])
        return sum(max(0.0, end - max(start, since)) for start, end in spans)

    def _set_down(self) -> None:
        if self._down_since is None:
            self._down_since = min(time.monotonic(), self.last_rpc)
        self.disconnected.set()

    def _set_up(self) -> None:
        if self._down_since is not None:
            self._downs.append((self._down_since, time.monotonic()))
            self._down_since = None
        self.disconnected.clear()

    def claim_released(self) -> None:
        """The schedd released the claim (RELEASE_CLAIM): no shadow can reconnect to the
        job any more, so a wait for one ends now instead of at the end of the job lease
        (condor_startd's RELEASE_CLAIM handler gives the same reason for its kill_claim)."""
        self._released.set()

    def close(self) -> None:
        """The conversation ended: every reconnect connection may close."""
        self.closed = True
        self._ended.set()
        for forget in self.on_close:
            forget()
        self.on_close.clear()
        if self._offered is not None:
            self._release(self._offered)
        for released in self._held.values():
            released.set()

    def _release(self, channel: MessageChannel) -> None:
        released = self._held.pop(id(channel), None)
        if released is not None:
            released.set()


async def _close(channel: MessageChannel) -> None:
    if isinstance(channel, Channel):
        await channel.close()


class ShadowLinks:
    """The running jobs' links, by claim: what CA_LOCATE_STARTER and CA_RECONNECT_JOB find."""

    def __init__(self) -> None:
        self._links: dict[str, ShadowLink] = {}

    def add(self, link: ShadowLink) -> None:
        self._links[link.session_id] = link

    def remove(self, link: ShadowLink) -> None:
        if self._links.get(link.session_id) is link:
            del self._links[link.session_id]

    def find(self, claim_id: str, global_job_id: str) -> ShadowLink | None:
        link = self._links.get(session_id(claim_id))
        if link is None or not link.claim_matches(claim_id) or \
                link.global_job_id != global_job_id:  # fmt: skip
            return None
        return link

    def by_claim(self, claim_id: str) -> ShadowLink | None:
        """The running job under this claim id (compared in constant time)."""
        link = self._links.get(session_id(claim_id))
        return link if link is not None and link.claim_matches(claim_id) else None

    def by_session(self, sid: str) -> ShadowLink | None:
        return self._links.get(sid)

    async def quiesce(self, timeout_s: float) -> None:
        """Before a restart in place cancels the job conversations: every running job's
        calls stop between two messages (execd.wire.call_turns), `timeout_s` at most;
        a job whose call is still under way then is logged (its connection is dropped)."""
        links = [link for link in self._links.values() if link.quiesce is not None]

        async def one(link: ShadowLink) -> None:
            assert link.quiesce is not None
            if not await link.quiesce(timeout_s):
                log.warning("shadow_call_not_quiesced", job=link.global_job_id,
                            waited_s=timeout_s)  # fmt: skip

        await asyncio.gather(*(one(link) for link in links))


LIVE_LINKS = ShadowLinks()  # execd's starter side lives in the daemon: one table
ScheddMoved = Callable[[str, str], None]


async def serve_ca_command(channel: Channel, peer: Peer, links: ShadowLinks = LIVE_LINKS, *,
                           schedd_moved: ScheddMoved | None = None) -> None:  # fmt: skip
    """CA_CMD: locate a job's starter, or reconnect a new shadow to its job."""
    try:
        request = decode_ca_request(channel.decoder(await channel.recv()))
    except RemoteProtocolError as exc:
        log.warning("ca_command_refused", peer=peer.address, session=peer.sid, why=str(exc))
        await channel.send(encode_ca_reply(channel.encoder(), INVALID_REQUEST,
                                           error=str(exc)).payload())  # fmt: skip
        return
    if isinstance(request, LocateStarter):
        link = links.find(request.claim_id, request.global_job_id)
        log.info("ca_locate_starter", peer=peer.address, session=session_id(request.claim_id),
                 job=request.global_job_id, found=link is not None)  # fmt: skip
        if link is None:
            why = (f"ClaimId ({session_id(request.claim_id)}#...) and GlobalJobId "
                   f"( {request.global_job_id} ) not found")  # fmt: skip
            await channel.send(encode_ca_reply(channel.encoder(), FAILURE, error=why).payload())
            return
        if request.schedd_address and schedd_moved is not None:
            schedd_moved(request.claim_id, request.schedd_address)
        found = from_values({"StarterIpAddr": link.starter_address,
                             "GlobalJobId": link.global_job_id})  # fmt: skip
        await channel.send(encode_ca_reply(channel.encoder(), SUCCESS, found).payload())
        return
    link = links.by_session(peer.sid)
    log.info("ca_reconnect_job", peer=peer.address, session=peer.sid,
             shadow=request.shadow_address, found=link is not None)  # fmt: skip
    if link is None or link.closed:
        await channel.send(encode_ca_reply(channel.encoder(), FAILURE,
                                           error="no running job under this claim").payload())
        return
    await channel.send(encode_ca_reply(channel.encoder(), SUCCESS, link.starter_ad).payload())
    await link.offer(channel, request)
