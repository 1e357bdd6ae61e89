"""execd's own CEDAR client (execd/wire) against the pool's real HTCondor collector.

FS authentication, ECDH + AES-GCM, session resumption, UPDATE_STARTD_AD with execd's
own slot ads (public + private), and INVALIDATE_STARTD_ADS, judged by condor_status.
Every test closes its connections and invalidates what it advertised.
"""

from __future__ import annotations

import asyncio
import pwd
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest

from execd.claims.ids import ClaimIdFactory
from execd.cli.status import local_ads
from execd.config.loader import load_config
from execd.machine.reader import LiveHostReader
from execd.wire.auth_fs import FsIdentity
from execd.wire.classad_codec import to_classad
from execd.wire.collector import CollectorClient
from execd.wire.commands import Command
from execd.wire.security import ClientSecurity, NotAuthorizedError
from execd.wire.session import Session
from execd.wire.sinful import Sinful, parse_sinful
from execd.wire.startd_ads import advertised_pair

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "etc" / "execd" / "execd_config"
# A placeholder address: this stop's execd does not listen for claims yet.
EXECD_ADDRESS = "<127.0.0.1:1?addrs=127.0.0.1-1&noUDP&sock=execd_test>"
WAIT_S = 30


def _collector(pool: harness.Pool) -> Sinful:
    text = (pool.local_dir / "log" / ".collector_address").read_text().splitlines()[0]
    return parse_sinful(text)


async def _poll(what: str, probe: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(harness.wait_for, what, probe, WAIT_S, 0.2)


def _uid_domain(pool: harness.Pool) -> str:
    return pool.tool("condor_config_val", "UID_DOMAIN").check().stdout.strip()


def _execd_slot_ads() -> list[Any]:
    config = load_config(DEFAULT_CONFIG)
    return local_ads(config, LiveHostReader(), now=int(time.time()),
                     defined_names=config.names())  # fmt: skip


def test_query_after_fs_authentication_gets_a_real_answer(pool: harness.Pool) -> None:
    async def run() -> tuple[list[dict[str, str]], ClientSecurity]:
        security = ClientSecurity()
        client = CollectorClient(_collector(pool), security)
        try:
            return await client.query(Command.QUERY_SCHEDD_ADS, "Scheduler"), security
        finally:
            await client.close()

    schedds, security = asyncio.run(run())
    names = [row[0] for row in pool.status_af("Name", what="-schedd")]
    assert [to_classad(ad)["Name"] for ad in schedds] == names
    (session,) = security.cache.sessions()
    assert session.auth_method == "FS"
    assert session.user.endswith("@" + _uid_domain(pool))
    assert Command.QUERY_STARTD_ADS in session.valid_commands


def _sids(security: ClientSecurity) -> list[str]:
    return sorted(s.sid for s in security.cache.sessions())


def test_later_commands_resume_the_session_and_survive_a_forgotten_one(
    pool: harness.Pool,
) -> None:
    async def run() -> tuple[list[str], list[str], str, int]:
        security = ClientSecurity()
        address = _collector(pool)
        client = CollectorClient(address, security)
        try:
            await client.query_startd_ads()
            first = _sids(security)
            await client.query_startd_ads()  # resumed: no second authentication
            second = _sids(security)
            # A session the collector never made: it answers SID_NOT_FOUND, the client
            # forgets it and authenticates afresh on a new connection.
            real = security.cache.get(first[0])
            assert real is not None
            forged = Session(sid="forged:1:2:3", key=real.key, connect_addr=str(address),
                             user=real.user, auth_method="FS", valid_commands=frozenset(),
                             remote_version="", expires_at=None)  # fmt: skip
            security.cache.invalidate(real.sid)
            security.cache.store(forged, Command.QUERY_STARTD_ADS)
            ads = await client.query_startd_ads()
            return first, second, _sids(security)[0], len(ads)
        finally:
            await client.close()

    first, second, third, count = asyncio.run(run())
    assert len(first) == 1 and second == first
    assert third not in (first[0], "forged:1:2:3")
    assert count == 0  # this pool has no execute point


def test_update_startd_ad_lists_execds_slot_then_invalidate_removes_it(
    pool: harness.Pool,
) -> None:
    slot_ads = _execd_slot_ads()
    claims = ClaimIdFactory(EXECD_ADDRESS, int(time.time()))
    pairs = [advertised_pair(ad, address=EXECD_ADDRESS, claim_id=claims.new()) for ad in slot_ads]
    expected = sorted([str(ad["Name"]), str(ad["State"]), str(ad["Activity"]), str(ad["Cpus"]),
                       str(ad["Memory"])] for ad in slot_ads)  # fmt: skip

    def listed() -> list[list[str]]:
        rows = pool.status_af("Name", "State", "Activity", "Cpus", "Memory", what="-slots")
        return sorted(rows)

    async def run() -> None:
        client = CollectorClient(_collector(pool), ClientSecurity())
        try:
            for public, private in pairs:
                await client.update_startd_ad(public, private)
            await _poll("execd's slots in condor_status", lambda: listed() == expected)
            long_ads = await asyncio.to_thread(pool.status, "-slots")
            # The collector keeps update statistics per slot name across invalidations.
            totals = {ad["Name"]: ad["UpdatesTotal"] for ad in long_ads}
            for ad in long_ads:
                assert {"Requirements", "Start", "Rank", "MyAddress"} <= set(ad)
                assert "ClaimId" not in ad and "Capability" not in ad
                assert ad["AuthenticationMethod"] == "FS"
            private = await client.query(Command.QUERY_STARTD_PVT_ADS, "Machine")
            assert sorted(to_classad(p)["ClaimId"] for p in private) == sorted(
                to_classad(pv)["ClaimId"] for _, pv in pairs
            )
            # A second update travels on the kept-open connection: same TCP stream.
            kept = client.update_connection
            public, pvt = pairs[0]
            await client.update_startd_ad({**public, "State": '"Owner"'}, pvt)
            assert client.update_connection is kept
            name = to_classad(public)["Name"]
            await _poll("the Owner state", lambda: [name, "Owner"] in
                        pool.status_af("Name", "State", what="-slots"))  # fmt: skip
            (updated,) = [a for a in await asyncio.to_thread(pool.status, "-slots")
                          if a["Name"] == name]  # fmt: skip
            assert updated["UpdatesTotal"] == totals[name] + 1
        finally:
            try:
                for public, _ in pairs:
                    await client.invalidate_startd_ad(to_classad(public)["Name"])
            finally:
                await client.close()
        await _poll("execd's slots gone", lambda: not listed())

    asyncio.run(run())


def test_unprivileged_identity_may_read_but_not_advertise(pool: harness.Pool) -> None:
    nobody = pwd.getpwnam("nobody")
    security = ClientSecurity(fs=FsIdentity(uid=nobody.pw_uid, gid=nobody.pw_gid))
    public, private = advertised_pair(
        _execd_slot_ads()[0], address=EXECD_ADDRESS,
        claim_id=ClaimIdFactory(EXECD_ADDRESS, 1).new(),
    )  # fmt: skip

    async def run() -> None:
        client = CollectorClient(_collector(pool), security)
        try:
            assert await client.query_startd_ads() == []
            with pytest.raises(NotAuthorizedError, match=r"'DENIED'.*nobody@"):
                await client.update_startd_ad(public, private)
        finally:
            await client.close()

    asyncio.run(run())
    (session,) = security.cache.sessions()
    assert session.user == f"nobody@{_uid_domain(pool)}"
    assert "PERMISSION DENIED to nobody@" in pool.daemon_log("CollectorLog")
    assert pool.status("-slots") == []
