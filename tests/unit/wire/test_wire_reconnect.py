"""The shadow's reconnect, pinned against reconnect.pcap: the real pool's schedd was
restarted (condor_restart -schedd) while HTCondor's own startd ran a job, and the new
shadow located the starter (CA_LOCATE_STARTER to the startd) and reconnected to it
(CA_RECONNECT_JOB), both as CA_CMD on the claim's session; decrypted here with the key
of the claim id the schedd kept in its job queue (the pool is gone).

Then execd's CA_CMD handler over a real connection with a resumed claim session: it
finds the job only by its claim id and GlobalJobId, says why not without the secret,
and hands a reconnect's connection to the job's link, whose next call is the real
starter's get_sec_session_info."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wire_captures import CAPTURES, Replay, decrypt_conversation

from execd.errors import ProtocolError, RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import decode_ad_lines, to_classad
from execd.wire.commands import Command
from execd.wire.encoding import Decoder, Encoder
from execd.wire.reconnect import (
    SUCCESS,
    LocateStarter,
    ReconnectJob,
    decode_ca_reply,
    decode_ca_request,
    encode_ca_reply,
    encode_ca_request,
)
from execd.wire.security import ClientSecurity, claim_client_session, connect, start_command
from execd.wire.server import CommandServer, Peer, ServerSecurity
from execd.wire.shadow import ShadowOptions, _starter_ad
from execd.wire.shadow_link import ShadowLink, ShadowLinks, serve_ca_command
from execd.wire.shadow_syscalls import ShadowSyscalls
from execd.wire.sinful import parse_sinful

CLAIM = (CAPTURES / "reconnect-claim.txt").read_text().strip()
SHARED_PORT = 10343
LOCATE_PORT, RECONNECT_PORT = 7897, 23791  # the new shadow's two CA_CMD connections
JOB = "vm#1.0#1795423818"


def conversation(port: int) -> tuple[list[bytes], list[bytes]]:
    """(the shadow's messages, the startd's or starter's), in clear."""
    return decrypt_conversation("reconnect.pcap", port, SHARED_PORT, claim_session(CLAIM).key)


def dec(message: bytes) -> Decoder:
    return Decoder(message, encrypted=True)


def test_the_real_locate_starter_request_decodes_and_reencodes_byte_for_byte() -> None:
    shadow, _ = conversation(LOCATE_PORT)
    request = decode_ca_request(dec(shadow[0]))
    assert isinstance(request, LocateStarter)
    assert request.global_job_id == JOB and request.claim_id == CLAIM
    assert request.schedd_address.endswith("sock=schedd_370558_8b76>")
    assert CLAIM.rsplit("]", 1)[1] not in repr(request)  # the secret stays out of repr
    assert encode_ca_request(Encoder(encrypted=True), request).payload() == shadow[0]


def test_the_real_startds_answer_names_the_starter() -> None:
    _, startd = conversation(LOCATE_PORT)
    reply = decode_ca_reply(dec(startd[0]))
    assert reply.ok and reply.error == ""
    found = to_classad(reply.ad)
    assert found["StarterIpAddr"].endswith("sock=slot1_1_370679_a37b_1>")
    assert found["GlobalJobId"] == JOB


def test_the_real_reconnect_request_decodes_and_reencodes_byte_for_byte() -> None:
    shadow, _ = conversation(RECONNECT_PORT)
    request = decode_ca_request(dec(shadow[0]))
    assert isinstance(request, ReconnectJob)
    assert request.shadow_address.endswith("sock=shadow_371401_5a58_1>")
    assert request.transfer_socket == request.shadow_address
    assert request.transfer_key == "1#6b03fe5b5eab04f758dcfa67"
    assert request.uid_domain == "vm" and "25.14.1" in request.shadow_version
    assert request.transfer_key not in repr(request)
    assert encode_ca_request(Encoder(encrypted=True), request).payload() == shadow[0]


def test_execds_reconnect_answer_has_what_the_real_starter_answers(tmp_path: Path) -> None:
    _, starter = conversation(RECONNECT_PORT)
    real = to_classad(decode_ca_reply(dec(starter[0])).ad)
    address = "<127.0.0.1:9618?addrs=127.0.0.1-9618>"
    ad = _starter_ad(ShadowOptions(slot_name="slot1@vm", uid_domain="vm"), tmp_path, address)
    ours = to_classad(decode_ca_reply(dec(
        encode_ca_reply(Encoder(encrypted=True), SUCCESS, ad).payload())).ad)  # fmt: skip
    # What the shadow reads from it (RemoteResource::setStarterInfo) and the CA framing.
    for name in ("Result", "MyType", "TargetType", "HasReconnect", "StarterIpAddr",
                 "UidDomain", "FileSystemDomain", "Name", "CondorVersion", "CondorPlatform",
                 "CondorScratchDir", "MyAddress", "Machine"):  # fmt: skip
        assert name in real and name in ours, name
        assert type(ours[name]) is type(real[name]), name
    for name in ("Result", "MyType", "TargetType", "HasReconnect", "UidDomain"):
        assert ours[name] == real[name], name
    assert ours["StarterIpAddr"] == address


def test_a_request_without_its_attributes_is_refused_by_name() -> None:
    enc = Encoder(encrypted=True).put_int(2).put_string('Command = "CA_LOCATE_STARTER"')
    enc.put_string('ClaimId = "x#1#2#abc"').put_string("").put_string("")
    with pytest.raises(RemoteProtocolError, match="no string GlobalJobId"):
        decode_ca_request(dec(enc.payload()))
    enc = Encoder(encrypted=True).put_int(1).put_string('Command = "CA_ACTIVATE_CLAIM"')
    with pytest.raises(RemoteProtocolError, match="'CA_ACTIVATE_CLAIM' is not served"):
        decode_ca_request(dec(enc.put_string("").put_string("").payload()))


def test_after_a_reconnect_the_job_asks_the_new_shadow_for_its_sessions_first() -> None:
    """The real starter's first call on the reconnected socket is get_sec_session_info
    with two empty strings; then the job's next register_job_info goes there."""
    shadow, starter = conversation(RECONNECT_PORT)
    request = decode_ca_request(dec(shadow[0]))
    assert isinstance(request, ReconnectJob)
    update = dec(starter[2])
    update.get_int()
    real_update = decode_ad_lines(update)
    new = Replay([("send", starter[1]), ("recv", shadow[1]),
                  ("send", starter[2]), ("recv", shadow[2])])  # fmt: skip
    old = Replay([])
    calls = ShadowSyscalls(old)
    link = ShadowLink(old, claim_id=CLAIM, global_job_id=JOB, lease_s=60, starter_ad={},
                      starter_address="<x>")  # fmt: skip
    calls.attach(link)

    async def run() -> None:
        handler = asyncio.create_task(link.offer(new, request))
        while calls.channel is not new:  # the offer adopts at once, before any job call
            await asyncio.sleep(0)
        await calls.register_job_info(dict(real_update))
        link.close()
        await handler

    asyncio.run(run())
    assert not new.script
    assert calls.sessions is not None
    assert calls.sessions.filetrans_id == "filetrans." + CLAIM.rsplit("#", 1)[0]
    assert link.transfer == (request.transfer_socket, request.transfer_key)


def test_a_released_claim_ends_the_wait_for_a_reconnect_at_once() -> None:
    """The schedd's RELEASE_CLAIM (claim_released) ends a wait for the shadow's reconnect
    with an error naming it, not after what is left of the job lease (an hour here)."""
    link = ShadowLink(Replay([]), claim_id=CLAIM, global_job_id=JOB, lease_s=3600,
                      starter_ad={}, starter_address="<x>")  # fmt: skip

    async def run() -> str:
        waiting = asyncio.create_task(link.wait_for_reconnect(OSError("connection reset")))
        while not link.disconnected.is_set():
            await asyncio.sleep(0)
        link.claim_released()
        with pytest.raises(ProtocolError) as raised:
            await asyncio.wait_for(waiting, 5)
        return str(raised.value)

    assert asyncio.run(run()) == (f"the schedd released the claim of {JOB}: no shadow "
                                  "reconnects (connection reset)")  # fmt: skip


# ----- execd's CA_CMD handler over a real connection --------------------------------------
SECRET = "a" * 64
OUR_CLAIM = f"<127.0.0.1:1?addrs=127.0.0.1-1>#1795423816#7#[Encryption=\"YES\";]{SECRET}"


async def _ca_command(address: str, request: LocateStarter | ReconnectJob,
                      claim: str = OUR_CLAIM) -> tuple[str, str, dict[str, object]]:  # fmt: skip
    where = parse_sinful(address)
    channel = await connect(where, timeout_s=5)
    try:
        await start_command(channel, where, Command.CA_CMD, ClientSecurity(timeout_s=5),
                            session=claim_client_session(claim_session(claim), where))  # fmt: skip
        await channel.send(encode_ca_request(channel.encoder(), request).payload())
        reply = decode_ca_reply(channel.decoder(await channel.recv()))
        values = to_classad(reply.ad)
        return reply.result, reply.error, {k: values[k] for k in values}
    finally:
        await channel.close()


def test_execd_locates_a_job_only_by_its_claim_and_job_id() -> None:
    links = ShadowLinks()
    moved: list[str] = []
    old = Replay([])
    link = ShadowLink(old, claim_id=OUR_CLAIM, global_job_id=JOB, lease_s=60,
                      starter_ad={"Name": '"slot1@vm"'},
                      starter_address="<127.0.0.1:1>")  # fmt: skip
    links.add(link)

    async def handler(channel: Channel, command: int, peer: Peer) -> None:
        await serve_ca_command(channel, peer, links,
                               schedd_moved=lambda _c, schedd: moved.append(schedd))  # fmt: skip

    async def run() -> list[tuple[str, str, dict[str, object]]]:
        security = ServerSecurity(domain="test", timeout_s=5)
        security.add_claim_session(claim_session(OUR_CLAIM))
        wrong = OUR_CLAIM.replace(SECRET, "b" * 64)
        security.add_claim_session(claim_session(wrong.replace("#7#", "#8#")))
        server = CommandServer({Command.CA_CMD: handler}, security)
        await server.start()
        try:
            found = await _ca_command(server.address, LocateStarter(JOB, OUR_CLAIM, "<schedd>"))
            other_job = await _ca_command(server.address, LocateStarter("vm#2.0#1", OUR_CLAIM))
            bad_secret = await _ca_command(server.address, LocateStarter(JOB, wrong))
            stranger = await _ca_command(
                server.address, ReconnectJob("<shadow>", "", "vm", "<shadow>", "1#k"),
                claim=wrong.replace("#7#", "#8#"))  # fmt: skip
            return [found, other_job, bad_secret, stranger]
        finally:
            link.close()
            await server.close()

    found, other_job, bad_secret, stranger = asyncio.run(run())
    assert found[0] == "Success" and found[2]["StarterIpAddr"] == "<127.0.0.1:1>"
    assert moved == ["<schedd>"]  # the restarted schedd's address, for ALIVE
    assert other_job[0] == bad_secret[0] == "Failure"
    assert "vm#2.0#1" in other_job[1] and "not found" in bad_secret[1]
    assert SECRET not in bad_secret[1] and "b" * 64 not in bad_secret[1]
    assert stranger[:2] == ("Failure", "no running job under this claim")
