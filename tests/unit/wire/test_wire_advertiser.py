"""The advertiser survives a collector it cannot reach: each round fails with a logged
reason and the next round (interval or change) tries again. (Against the real collector:
tests/pool/test_wire_advertiser_pool.py.)"""

from __future__ import annotations

import asyncio
import socket

import pytest

from execd.wire.advertiser import Advertiser
from execd.wire.classad_codec import from_values
from execd.wire.collector import CollectorClient
from execd.wire.security import ClientSecurity
from execd.wire.sinful import parse_sinful


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # nothing listens here now: connections are refused


@pytest.mark.asyncio
async def test_unreachable_collector_costs_a_failed_round_not_the_daemon() -> None:
    address = parse_sinful(f"<127.0.0.1:{_closed_port()}>")
    client = CollectorClient(address, ClientSecurity(timeout_s=1))
    ad = from_values({"MyType": "Machine", "Name": "slot1@x"})
    advertiser = Advertiser(client, lambda: [(ad, ad)], interval_s=3600)
    task = asyncio.create_task(advertiser.run())
    try:
        await asyncio.wait_for(advertiser.wait_rounds(1), 10)
        assert advertiser.failures == 1
        advertiser.changed()  # a state change: another round at once, not in an hour
        await asyncio.wait_for(advertiser.wait_rounds(2), 10)
        assert advertiser.failures == 2
        assert not task.done()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await advertiser.stop()
