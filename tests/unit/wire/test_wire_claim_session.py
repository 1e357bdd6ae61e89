"""Claim-id sessions, pinned against a real schedd and startd: the key derived from a
claim id decrypts their captured REQUEST_CLAIM exchange, through execd's Channel."""

from __future__ import annotations

import asyncio

import pytest
from wire_captures import stream
from wire_pairs import raw_pair

from execd.claims.ids import ClaimIdFactory
from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.claim_session import MATCH_SESSION_USER, claim_session
from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.encoding import Decoder
from execd.wire.framing import unframe_plain
from execd.wire.security import ClientSecurity, claim_client_session, connect, start_command
from execd.wire.server import CommandServer, Peer, ServerSecurity
from execd.wire.sinful import parse_sinful

SCHEDD = 15609  # the schedd's port in job1.pcap for its REQUEST_CLAIM to the startd
STARTD = 2673


def _real_claim_id() -> str:
    # The startd handed this claim id to its starter on a local socket ("ZKM" marked).
    message = unframe_plain(stream("job1.pcap", 30715, 9819))[1]
    claim: str = to_classad(decode_ad(Decoder(message)))["ClaimId"]
    return claim


def test_session_id_and_info_of_a_real_claim_id() -> None:
    session = claim_session(_real_claim_id())
    resume = unframe_plain(stream("job1.pcap", SCHEDD, STARTD))[1]
    dec = Decoder(resume)
    assert dec.get_int() == 60010
    ad = to_classad(decode_ad(dec))
    assert ad["Command"] == 442  # REQUEST_CLAIM
    assert ad["UseSession"] == "YES"
    assert ad["Sid"] == session.sid  # the schedd resumes the claim's own session
    assert session.sid.endswith("#1795345264#5")
    assert session.info["CryptoMethodsList"] == "AES.BLOWFISH.3DES"
    assert "64c2dedb" not in repr(session)  # the secret stays out of repr


async def _as_startd() -> bytes:
    """Receive the schedd's captured bytes with execd's Channel, as the startd did."""
    client = stream("job1.pcap", SCHEDD, STARTD)
    answer = unframe_plain(stream("job1.pcap", STARTD, SCHEDD)[: 5 + 172])[0]
    ours, peer = await raw_pair(timeout_s=2)
    try:
        peer.write(client)
        await ours.recv()  # the shared-port request
        ours.reset_digests()
        await ours.recv()  # DC_AUTHENTICATE, UseSession
        await ours.send(answer)  # the startd's own resume answer, byte for byte
        ours.enable_crypto(claim_session(_real_claim_id()).key)
        return await ours.recv()
    finally:
        await ours.close()
        peer.close()


def test_real_request_claim_decrypts_with_the_claim_key() -> None:
    payload = asyncio.run(_as_startd())
    dec = Decoder(payload, encrypted=True)
    assert dec.get_string("claim id") == _real_claim_id()
    job = to_classad(decode_ad(dec, "job ad"))
    assert job["Owner"] == "alice" and job["RequestCpus"] == 1
    assert dec.get_string("schedd address").endswith("sock=schedd_32201_ba75>")
    assert dec.get_int("alive interval") == 300
    assert dec.get_int("extra claims") == 0
    dec.finish()


async def _as_schedd() -> bytes:
    sent = unframe_plain(stream("job1.pcap", SCHEDD, STARTD)[: 5 + 140 + 5 + 565])[1]
    ours, peer = await raw_pair(timeout_s=2)
    try:
        peer.write(stream("job1.pcap", STARTD, SCHEDD))
        await ours.send(sent)
        await ours.recv()  # ReturnCode = "AUTHORIZED"
        ours.enable_crypto(claim_session(_real_claim_id()).key)
        return await ours.recv()
    finally:
        await ours.close()
        peer.close()


def test_real_partitionable_claim_reply_decrypts() -> None:
    # Four packets, the IV counter running across them.
    reply = asyncio.run(_as_schedd())
    dec = Decoder(reply, encrypted=True)
    assert dec.get_int() == 7  # OK, and here is the dynamic slot's claim
    assert dec.get_string().split("#")[1:3] == ["1795345264", "5"]
    dslot = to_classad(decode_ad(dec))
    assert (dslot["Name"], dslot["State"]) == ("slot1_1@vm", "Claimed")
    assert dec.get_int() == 5  # the leftover partitionable slot's new claim and ad
    assert dec.get_string().split("#")[1:3] == ["1795345264", "10"]
    assert to_classad(decode_ad(dec))["Name"] == "slot1@vm"
    dec.finish()


async def _claim_command(server_claim: str, client_claim: str) -> tuple[str, list[Peer]]:
    seen: list[Peer] = []

    async def handler(channel: Channel, command: int, peer: Peer) -> None:
        seen.append(peer)
        dec = channel.decoder(await channel.recv())
        await channel.send(channel.encoder().put_string(dec.get_string()[::-1]).payload())

    async def authorize(command: int, peer: Peer) -> bool:  # a coroutine, as the pool's
        seen.append(peer)
        return True

    security = ServerSecurity(domain="d", timeout_s=2, authorize=authorize)
    security.add_claim_session(claim_session(server_claim))
    server = CommandServer({442: handler}, security)
    await server.start()
    try:
        address = parse_sinful(server.address)
        channel = await connect(address, timeout_s=2)
        try:
            session = claim_client_session(claim_session(client_claim), address)
            await start_command(channel, address, 442, ClientSecurity(timeout_s=2),
                                session=session)  # fmt: skip
            await channel.send(channel.encoder().put_string("claim me").payload())
            return channel.decoder(await channel.recv()).get_string(), seen
        finally:
            await channel.close()
    finally:
        await server.close()


def test_claim_holder_resumes_the_claims_session_without_a_handshake() -> None:
    claim = ClaimIdFactory("<127.0.0.1:9?sock=execd>", 1700000000).new().full()
    answer, seen = asyncio.run(_claim_command(claim, claim))
    assert answer == "em mialc"
    # authorized, then served, as the connection's own peer (ALLOW_/DENY_ by address
    # apply to a claim's holder), not as the "(claim)" the session was made with
    assert [(p.user, p.method) for p in seen] == [(MATCH_SESSION_USER, "MATCH")] * 2
    assert all(p.address.startswith("127.0.0.1:") for p in seen), seen


def test_wrong_claim_secret_is_refused() -> None:
    factory = ClaimIdFactory("<127.0.0.1:9?sock=execd>", 1700000000)
    good = factory.new()
    forged = good.__class__(good.address, good.birthday, good.sequence, "0" * 64).full()
    with pytest.raises(RemoteProtocolError):
        asyncio.run(_claim_command(good.full(), forged))


def test_malformed_claim_id_is_refused_without_its_secret() -> None:
    with pytest.raises(RemoteProtocolError, match="claim id '<a:1>#1#2'") as info:
        claim_session("<a:1>#1#2#[X=1;]nothex-s3cret")
    assert "s3cret" not in str(info.value)
