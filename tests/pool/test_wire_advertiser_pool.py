"""execd's advertiser against the real collector: execd's slot ads appear, a change is
advertised at once (the interval is an hour), a slot that disappears is invalidated,
and stop() leaves nothing behind in condor_status."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pool_harness as harness

from execd.claims.ids import ClaimIdFactory
from execd.cli.status import local_ads
from execd.config.loader import load_config
from execd.machine.reader import LiveHostReader
from execd.wire.advertiser import Advertiser
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.collector import CollectorClient
from execd.wire.security import ClientSecurity
from execd.wire.sinful import parse_sinful
from execd.wire.startd_ads import advertised_pair

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "etc" / "execd" / "execd_config"
ADDRESS = "<127.0.0.1:1?addrs=127.0.0.1-1&noUDP&sock=execd_test>"


def test_advertiser_follows_changes_and_cleans_up(pool: harness.Pool) -> None:
    config = load_config(DEFAULT_CONFIG)
    (slot,) = local_ads(config, LiveHostReader(), now=int(time.time()),
                        defined_names=config.names())  # fmt: skip
    public, private = advertised_pair(slot, address=ADDRESS,
                                      claim_id=ClaimIdFactory(ADDRESS, 1).new())  # fmt: skip
    name = str(slot["Name"])
    dynamic_name = "slot1_1@" + name.split("@", 1)[1]
    state: dict[str, Any] = {"State": "Unclaimed", "dynamic": False}

    def ads() -> list[tuple[WireAd, WireAd]]:
        current = {**public, **from_values({"State": state["State"]})}
        pairs = [(current, private)]
        if state["dynamic"]:
            names = from_values({"Name": dynamic_name})
            pairs.append(({**current, **names}, {**private, **names}))
        return pairs

    def listed() -> list[list[str]]:
        return sorted(pool.status_af("Name", "State", what="-slots"))

    async def until(what: str, want: list[list[str]]) -> None:
        await asyncio.to_thread(harness.wait_for, what, lambda: listed() == want, 30, 0.2)

    async def run() -> None:
        collector = CollectorClient(parse_sinful(
            (pool.local_dir / "log" / ".collector_address").read_text().splitlines()[0]
        ), ClientSecurity())  # fmt: skip
        advertiser = Advertiser(collector, ads, interval_s=3600)
        task = asyncio.create_task(advertiser.run())
        try:
            await until("the slot", [[name, "Unclaimed"]])
            state.update(State="Owner", dynamic=True)
            advertiser.changed()
            await until("the change", [[name, "Owner"], [dynamic_name, "Owner"]])
            state["dynamic"] = False
            advertiser.changed()
            await until("the dynamic slot invalidated", [[name, "Owner"]])
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await advertiser.stop()
        await until("nothing left", [])
        assert advertiser.failures == 0

    asyncio.run(run())
