"""IDTOKENS (what multi-host pools use) against the real collector: a token made by the
pool's own condor_token_create authenticates execd's client; an altered one does not."""

from __future__ import annotations

import asyncio
import base64
import time
from pathlib import Path

import pool_harness as harness
import pytest

from execd.claims.ids import ClaimIdFactory
from execd.cli.status import local_ads
from execd.config.loader import load_config
from execd.machine.reader import LiveHostReader
from execd.wire.auth_fs import AuthenticationFailedError
from execd.wire.auth_token import IdToken, parse_token
from execd.wire.classad_codec import to_classad
from execd.wire.collector import CollectorClient
from execd.wire.commands import Command
from execd.wire.security import ClientSecurity
from execd.wire.sinful import parse_sinful
from execd.wire.startd_ads import advertised_pair

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "etc" / "execd" / "execd_config"
ADDRESS = "<127.0.0.1:1?addrs=127.0.0.1-1&noUDP&sock=execd_test>"


def _token(pool: harness.Pool) -> IdToken:
    domain = pool.tool("condor_config_val", "UID_DOMAIN").check().stdout.strip()
    text = pool.tool("condor_token_create", "-identity", f"condor@{domain}").check().stdout
    return parse_token(text)


def _client(pool: harness.Pool, token: IdToken) -> tuple[CollectorClient, ClientSecurity]:
    address = (pool.local_dir / "log" / ".collector_address").read_text().splitlines()[0]
    security = ClientSecurity(methods=("IDTOKENS",), token=token)
    return CollectorClient(parse_sinful(address), security), security


def test_token_authenticates_and_advertises(pool: harness.Pool) -> None:
    token = _token(pool)
    config = load_config(DEFAULT_CONFIG)
    (slot,) = local_ads(config, LiveHostReader(), now=int(time.time()),
                        defined_names=config.names())  # fmt: skip
    public, private = advertised_pair(slot, address=ADDRESS,
                                      claim_id=ClaimIdFactory(ADDRESS, 1).new())  # fmt: skip
    name = to_classad(public)["Name"]

    async def run() -> list[dict[str, str]]:
        client, security = _client(pool, token)
        try:
            schedds = await client.query(Command.QUERY_SCHEDD_ADS, "Scheduler")
            (session,) = security.cache.sessions()
            assert (session.user, session.auth_method) == (token.subject, "IDTOKENS")
            await client.update_startd_ad(public, private)
            await asyncio.to_thread(harness.wait_for, "the slot",
                                    lambda: pool.status("-slots"), 30, 0.2)  # fmt: skip
            (ad,) = await asyncio.to_thread(pool.status, "-slots")
            assert ad["Name"] == name
            assert ad["AuthenticatedIdentity"] == token.subject
            assert ad["AuthenticationMethod"] == "IDTOKENS"
            return schedds
        finally:
            try:
                await client.invalidate_startd_ad(name)
            finally:
                await client.close()

    assert len(asyncio.run(run())) == 1
    harness.wait_for("the slot gone", lambda: not pool.status("-slots"), 30, 0.2)


def test_altered_token_is_refused(pool: harness.Pool) -> None:
    token = _token(pool)
    head, body, sig = token.text.split(".")
    raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
    raw[0] ^= 1
    forged = parse_token(".".join([head, body,
                                   base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")]))

    async def run() -> None:
        client, _ = _client(pool, forged)
        try:
            await client.query_startd_ads()
        finally:
            await client.close()

    with pytest.raises(AuthenticationFailedError, match="does not hold the key"):
        asyncio.run(run())
