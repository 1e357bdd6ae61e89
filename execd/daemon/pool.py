"""Pool mode: execd as an execute point of an HTCondor pool.

When COLLECTOR_HOST (or CONDOR_HOST) is set, the daemon owns one PoolMember (a task in
its TaskGroup). It listens for the startd commands on its own TCP port
(EXECD_COMMAND_ADDRESS) with execd.wire's server, advertises every slot (public +
private ad) every UPDATE_INTERVAL and at once on every state change, sends ALIVE to
the schedd of every claim made through the pool, and invalidates its ads when it
stops. The commands themselves (execd.daemon.pool_commands) drive the same
JobManager and policy-engine paths as the control socket's verbs.

Claim ids: every slot advertises an *offer*, a claim id the negotiator hands to the
schedd it matches; a REQUEST_CLAIM must carry it. A static or dynamic slot's offer
becomes the claim's id; a partitionable slot's gives the new dynamic slot a fresh id
and is then replaced (so a replayed REQUEST_CLAIM finds no session). A claimed slot's
offer is its *preempting* claim id (HTCondor's r_pre): a higher-RANK match claims with
it, and the reply waits until the current claim is gone. Every claim id's security
session is known to the server exactly while the id is live.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execd import log
from execd.aio import cancel_until_done
from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.daemon.control import ControlError
from execd.daemon.pool_claimant import claimant_attributes
from execd.daemon.pool_daemon_attrs import DaemonAttributes
from execd.daemon.pool_job import PoolJob
from execd.daemon.pool_job_attrs import JobAttributes
from execd.daemon.pool_lookups import PoolLookups
from execd.daemon.pool_settings import PoolSettings, pool_settings
from execd.daemon.startd_daemon_ad import StartdDaemonAd
from execd.errors import ExecdError, ProtocolError
from execd.wire.advertiser import Advertiser, slot_name, wait_event
from execd.wire.call_turns import QUIESCE_S
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import WireAd
from execd.wire.collector import CollectorClient
from execd.wire.schedd_client import UNKNOWN_CLAIM, send_alive, send_release
from execd.wire.security import ClientSecurity
from execd.wire.server import CommandServer, ServerSecurity
from execd.wire.shadow_link import LIVE_LINKS
from execd.wire.shared_port import SharedPortEndpoint
from execd.wire.sinful import parse_sinful, with_alias
from execd.wire.startd_ads import advertised_pair

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("pool")

STOP_TIMEOUT_S = 20.0  # invalidating ads on shutdown never holds the daemon longer
LISTEN_PORT_KEY = "pool_listen_port"  # the store's meta: the command port of the last run


@dataclass
class PoolClaim:
    """A claim made through the pool: whom to send ALIVE, and how often."""

    claim: ClaimId
    slot: str
    schedd: str
    alive_interval: int
    next_alive: float


class PoolMember:
    """The daemon's membership of one pool; run() as a task, changed() on any change."""

    def __init__(self, daemon: Daemon, config: PoolSettings) -> None:
        from execd.daemon.pool_commands import PoolCommands  # noqa: PLC0415

        self.daemon = daemon
        self.config = config
        # A configured token is the operator's choice (a multi-host pool): IDTOKENS only.
        self.client = ClientSecurity(token=config.token,
                                     methods=("IDTOKENS",) if config.token else ("FS",))
        self.commands = PoolCommands(self)
        # Peers authenticate with FS (same host) or an IDTOKEN of the pool (any host).
        self.security = ServerSecurity(domain=config.domain, timeout_s=20,
                                       methods=("FS", "IDTOKENS"), tokens=config.tokens,
                                       authorize=self.commands.authorize)  # fmt: skip
        self.server = CommandServer(self.commands.handlers(), self.security)
        self.collector = CollectorClient(config.collector, self.client)
        self.startd_ad = StartdDaemonAd(self)  # the node's StartD ad besides its slot ads
        self.advertiser = Advertiser(self.collector, self.advertised_pairs,
                                     interval_s=config.interval_s,
                                     started=lambda: (daemon.started, daemon.reconfigured),
                                     daemon_ad=self.startd_ad)  # fmt: skip
        self.address = ""
        self.ids: ClaimIdFactory | None = None
        self.offers: dict[str, ClaimId] = {}  # slot -> the claim id it advertises
        self.claims: dict[str, PoolClaim] = {}  # full claim id -> pool claim
        self._sessions: set[str] = set()  # claim session ids the server accepts
        self._alive_wake = asyncio.Event()
        self.state_changed = asyncio.Event()
        self.closed_by_schedd: set[str] = set()  # claims whose schedd ended them
        self._notices: set[asyncio.Task[None]] = set()  # RELEASE_CLAIMs in flight
        self.daemon_attrs = DaemonAttributes(self)  # TotalSlots, JobStarts, MonitorSelf*, ...
        # JobId, ClientMachine, ImageSize, PublicClaimId, ... of claimed slots
        self.job_attrs = JobAttributes(daemon.jobs, lambda: daemon.settings)
        # the authz policy's host names and the transfer plugins, at join and reload
        self.lookups = PoolLookups(self)

    # -- lifecycle ---------------------------------------------------------------------
    async def run(self) -> None:
        from execd.daemon.pool_conversation import restore  # noqa: PLC0415

        self.daemon_attrs.duty.install(asyncio.get_running_loop())
        if self.config.authz.host_names():  # before the first command is judged
            await self.lookups.resolve_authz(self.config.authz, at_start=True)
        await self.lookups.ask_plugins()  # before the first ad
        await self._listen()
        self.address = self.server.address
        endpoint = None
        if self.config.shared_port is not None:  # reached through the shared port
            self.address, name, socket_dir = self.config.shared_port
            endpoint = SharedPortEndpoint(socket_dir, name,
                                          lambda sock: self.server.adopt(sock, name))
            await endpoint.start()
        self.address = with_alias(self.address, self.daemon.settings.get_str("HOST_ALIAS") or "")
        self.ids = ClaimIdFactory(self.address, int(time.time()))
        logger.info("pool_joined", collector=str(self.config.collector), address=self.address)
        loops = [asyncio.create_task(self.advertiser.run()),
                 asyncio.create_task(self._alive_loop())]
        resumed = restore(self)  # after a restart: the claims and conversations go on
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a loop that crashed takes the daemon down, as in a TaskGroup
        finally:
            if self.daemon.stopping == "restart":  # the shadow connections go on in the
                await LIVE_LINKS.quiesce(QUIESCE_S)  # next image: none cut mid-call
            await cancel_until_done(loops + resumed + list(self._notices)
                                    + self.lookups.tasks())  # fmt: skip
            if endpoint is not None:
                await endpoint.close()
            await self.server.close()
            try:
                await asyncio.wait_for(self.advertiser.stop(), STOP_TIMEOUT_S)
            except TimeoutError:
                logger.warning("pool_invalidate_timed_out", collector=str(self.config.collector))
            logger.info("pool_left", collector=str(self.config.collector))

    async def _listen(self) -> None:
        """Listen on EXECD_COMMAND_ADDRESS; with port 0, on the port the last run had if
        it is free: the claim ids a restart keeps name it (the shadow's reconnect)."""
        store, port = self.daemon.jobs.store, self.config.listen_port
        remembered = store.meta(LISTEN_PORT_KEY) if port == 0 else None
        if remembered is not None:
            try:
                await self.server.start(self.config.listen_host, int(remembered))
            except OSError as exc:
                logger.warning("pool_port_not_reused", port=int(remembered), reason=str(exc))
            else:
                return
        await self.server.start(self.config.listen_host, port)
        if port == 0:
            store.set_meta(LISTEN_PORT_KEY, str(self.server.port))

    def changed(self) -> None:
        """A slot changed state: advertise now, not at the next UPDATE_INTERVAL."""
        self.advertiser.changed()
        self.state_changed.set()

    async def wait_for_takeover(self, slot: str, claim: ClaimId,
                                given_up: asyncio.Future[Any]) -> bool:  # fmt: skip
        """Until the preempting `claim` is `slot`'s current claim (True), or it went away
        or its holder gave up (`given_up` done: the schedd closed its REQUEST_CLAIM, as at
        its REQUEST_CLAIM_TIMEOUT) (False). No timer of execd's bounds the wait, as none
        of condor_startd's does (Claim::requestClaimSockClosed is what ends it there)."""
        while True:
            self.state_changed.clear()
            current = self.daemon.engine.slots.get(slot)
            if current is not None and current.claim is not None \
                    and current.claim.id.full() == claim.full():  # fmt: skip
                return True
            if claim.full() not in self.daemon.jobs.claims or given_up.done():
                return False
            changed = asyncio.ensure_future(self.state_changed.wait())
            try:
                await asyncio.wait({changed, given_up}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()

    # -- claim ids ---------------------------------------------------------------------
    def new_claim_id(self) -> ClaimId:
        assert self.ids is not None, "run() first"
        claim = self.ids.new()
        self.accept_claim(claim)
        return claim

    def accept_claim(self, claim: ClaimId) -> None:
        """The server accepts `claim`'s security session (its holder resumes it)."""
        self.security.add_claim_session(claim_session(claim))
        self._sessions.add(claim.session_id)

    def offer_for(self, claim_id: str) -> str | None:
        """The slot whose advertised offer is exactly `claim_id` (secret compared in
        constant time), or None."""
        for slot, offer in self.offers.items():
            if hmac.compare_digest(offer.full().encode(), claim_id.encode()):
                return slot
        return None

    def replace_offer(self, slot: str) -> None:
        old = self.offers.pop(slot, None)
        if old is not None:
            self.forget_session(old)
        self.offers[slot] = self.new_claim_id()

    def forget_session(self, claim: ClaimId) -> None:
        self.security.remove_session(claim.session_id)
        self._sessions.discard(claim.session_id)

    def _sync_claims(self, names: list[str]) -> None:
        """An offer for every slot (a claimed one's is its preempting claim id); sessions
        of ended claims forgotten."""
        live = self.daemon.jobs.claims
        for name in names:
            if name not in self.offers:
                self.offers[name] = self.new_claim_id()
        for name in list(self.offers):
            if name not in names:
                offer = self.offers.pop(name)
                if offer.full() not in live:
                    self.forget_session(offer)
        for key in [k for k in self.claims if k not in live]:
            ended = self.claims.pop(key)
            by_schedd = key in self.closed_by_schedd
            logger.info("pool_claim_ended", slot=ended.slot, claim=str(ended.claim),
                        ended_by="schedd" if by_schedd else "execd")  # fmt: skip
            self.daemon.jobs.store.remove_pool_claim(ended.claim.session_id)
            self.job_attrs.forget(key)
            if by_schedd:
                self.closed_by_schedd.discard(key)
                self.forget_session(ended.claim)
            else:  # execd ended it (preemption, vacate, drain): tell its schedd
                task = asyncio.get_running_loop().create_task(self._release_notice(ended))
                self._notices.add(task)
                task.add_done_callback(self._notices.discard)

    async def _release_notice(self, ended: PoolClaim) -> None:
        """RELEASE_CLAIM to the schedd of a claim execd ended, on the claim's session
        (or, where the schedd has none, an authenticated one); then the session goes."""
        schedd, key = parse_sinful(ended.schedd), ended.claim.full()
        try:
            await send_release(schedd, key, self.client)
            logger.info("pool_release_sent", slot=ended.slot, schedd=ended.schedd)
        except (ProtocolError, ExecdError, OSError) as exc:
            logger.warning("pool_release_not_sent", slot=ended.slot, schedd=ended.schedd,
                           reason=str(exc))  # fmt: skip
        finally:
            self.forget_session(ended.claim)

    # -- ads ----------------------------------------------------------------------------
    def slot_ads(self) -> dict[str, Any]:
        return {str(ad["Name"]).split("@")[0]: ad for ad in self.daemon.ads()}

    def pair(self, name: str, ad: Any) -> tuple[WireAd, WireAd]:
        """(public, private) wire ads for one slot, with what the pool needs to match."""
        live = self.daemon.jobs.claims
        current = next((c for s, c in live.values() if s == name), None)
        claim = self.offers.get(name) or current
        assert claim is not None, "_sync_claims() first"
        children = {s: c for s, c in self.offers.items() if s.startswith(f"{name}_")}
        public, private = advertised_pair(ad, address=self.address, claim_id=claim,
                                          child_claim_ids=children,
                                          limits=self.daemon_attrs.limits())  # fmt: skip
        # CondorVersion, the domains, HasFileTransfer, ... (execd/daemon/pool_daemon_attrs.py)
        for key, value in {**self.daemon_attrs.for_slot(name, ad),
                           **self.startd_ad.slot_attributes()}.items():
            public.setdefault(key, value)
        return public, private

    def claimant(self, name: str) -> dict[str, Any]:
        """Who holds the slot's claim (RemoteUser, CurrentRank, ...) and its job (JobId,
        ImageSize, ...), for its ad."""
        if (slot := self.daemon.engine.slots.get(name)) is None:
            return {}
        return claimant_attributes(slot, self.config.domain) | self.job_attrs.attributes(slot)

    def ad_pairs(self) -> list[tuple[WireAd, WireAd]]:
        """Every slot's ads, as each publish or direct query makes them."""
        ads = self.slot_ads()
        self._sync_claims(list(ads))
        return [self.pair(name, ad) for name, ad in ads.items()]

    def advertised_pairs(self) -> list[tuple[WireAd, WireAd]]:
        """The advertiser's round: ad_pairs, and a running job's slot ad to its
        `.update.ad` when that slot's update is due (UpdateAdFile.publish), as
        condor_startd's get_update_ads does; a direct query writes nothing."""
        pairs = self.ad_pairs()
        by_slot = {slot_name(public).split("@")[0]: public for public, _ in pairs}
        for runner in self.daemon.jobs.conversations:
            if isinstance(runner, PoolJob) and runner.job is not None \
                    and runner.job.slot in by_slot:  # fmt: skip
                runner.publish_slot_ad(by_slot[runner.job.slot], self.config.interval_s)
        return pairs

    def public_ad(self, name: str) -> WireAd:
        ads = self.slot_ads()
        self._sync_claims(list(ads))
        return self.pair(name, ads[name])[0]

    def one_public_ad(self, name: str) -> WireAd | None:
        """A claimed slot's public ad built for it alone (Daemon.slot_ad: a job's start
        builds no other slot's); None if the slot or its claim is gone."""
        if not any(slot == name for slot, _ in self.daemon.jobs.claims.values()):
            return None
        resource_ad = self.daemon.node.slots.resource_ad(name, int(time.time()),
                                                         self.daemon.node.load)  # fmt: skip
        return None if resource_ad is None else \
            self.pair(name, self.daemon.slot_ad(name, resource_ad))[0]  # fmt: skip

    # -- ALIVE to the schedds ----------------------------------------------------------
    def track(self, claim: ClaimId, slot: str, schedd: str, lease_s: int) -> None:
        """ALIVE to `schedd` every lease_s/3 (at least every second) while claimed."""
        interval = max(lease_s, 3)
        self.claims[claim.full()] = PoolClaim(claim, slot, schedd, interval,
                                              time.monotonic() + interval / 3)  # fmt: skip
        self.daemon.jobs.store.set_pool_claim(claim.session_id, schedd, lease_s)
        self._alive_wake.set()

    def schedd_moved(self, claim_id: str, schedd: str) -> None:
        """The claim's schedd restarted (the shadow's CA_LOCATE_STARTER says where):
        ALIVE goes there now."""
        if (held := self.claims.get(claim_id)) is not None:
            held.schedd = schedd
            self.daemon.jobs.store.set_pool_claim(held.claim.session_id, schedd,
                                                  held.alive_interval)  # fmt: skip

    async def _alive_loop(self) -> None:
        """Every claim's schedd gets an ALIVE every lease/3; a schedd that no
        longer knows the claim (-1, or no session) has it released, as a startd does."""
        while True:
            mono = time.monotonic()
            for key, held in list(self.claims.items()):
                if held.next_alive <= mono:
                    held.next_alive = mono + held.alive_interval / 3
                    await self._alive(key, held)
            due = min((c.next_alive for c in self.claims.values()), default=mono + 3600)
            self._alive_wake.clear()
            await wait_event(self._alive_wake, max(0.0, due - time.monotonic()))

    async def _alive(self, key: str, held: PoolClaim) -> None:
        schedd = parse_sinful(held.schedd)
        try:
            answer = await send_alive(schedd, key, self.client)
        except (ProtocolError, ExecdError, OSError) as exc:
            logger.warning("alive_failed", slot=held.slot, claim=str(held.claim),
                           schedd=held.schedd, reason=str(exc))  # fmt: skip
            return
        try:
            if answer == UNKNOWN_CLAIM:
                logger.info("alive_claim_unknown", slot=held.slot, claim=str(held.claim))
                self.closed_by_schedd.add(key)
                self.daemon.jobs.release(key)
            else:
                self.daemon.jobs.signal_job(key, "alive")
        except ControlError as exc:
            self.closed_by_schedd.discard(key)
            logger.info("alive_not_applied", slot=held.slot, reason=exc.message)


def pool_member(daemon: Daemon) -> PoolMember | None:
    """The daemon's pool membership when its configuration names a pool."""
    config = pool_settings(daemon.settings)
    return None if config is None else PoolMember(daemon, config)
