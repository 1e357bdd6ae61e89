"""A static slot that a test's own command handlers serve, advertised to the pool's
collector as execd advertises its slot: for pool tests that drive execd's wire code
(claims, the shadow's conversation) without an execd daemon."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pool_harness as harness

from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.cli.status import local_ads
from execd.config.loader import load_config
from execd.machine.reader import LiveHostReader
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import from_values, to_classad
from execd.wire.collector import CollectorClient
from execd.wire.security import CONDOR_VERSION, ClientSecurity
from execd.wire.server import CommandServer, Handler, ServerSecurity
from execd.wire.sinful import parse_sinful
from execd.wire.startd_ads import advertised_pair

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "etc" / "execd" / "execd_config"


@asynccontextmanager
async def advertised_static_slot(pool: harness.Pool, handlers: Mapping[int, Handler],
                                 security: ServerSecurity,
                                 ) -> AsyncIterator[tuple[ClaimId, str]]:  # fmt: skip
    """A command server with `handlers`, its claim id's session in `security`, and the
    slot's ad (the default config's one slot, made static) in the collector; yields the
    claim id and the slot's Name. On leaving, the ad is invalidated and the server closed."""
    server = CommandServer(handlers, security)
    await server.start()
    claim = ClaimIdFactory(server.address, int(time.time())).new()
    security.add_claim_session(claim_session(claim))
    config = load_config(DEFAULT_CONFIG)
    (slot,) = local_ads(config, LiveHostReader(), now=int(time.time()),
                        defined_names=config.names())  # fmt: skip
    public, private = advertised_pair(slot, address=server.address, claim_id=claim)
    # A static slot, with what the negotiator and schedd check before claiming.
    public.update(from_values({
        "PartitionableSlot": False, "SlotType": "Static", "HasFileTransfer": True,
        "FileSystemDomain": "execd.test", "UidDomain": "execd.test",
        "CondorVersion": CONDOR_VERSION,
    }))  # fmt: skip
    name = str(to_classad(public)["Name"])
    collector_text = (pool.local_dir / "log" / ".collector_address").read_text()
    collector = CollectorClient(parse_sinful(collector_text.splitlines()[0]), ClientSecurity())
    try:
        await collector.update_startd_ad(public, private)
        yield claim, name
    finally:
        try:
            await collector.invalidate_startd_ad(name)
        finally:
            await collector.close()
            await server.close()
