"""Claim command payloads, pinned against the real schedd, shadow and startd: each
captured message (decrypted with its claim's key) decodes and re-encodes byte for byte."""

from __future__ import annotations

import pytest
from wire_captures import decrypt_conversation, stream

from execd.errors import RemoteProtocolError
from execd.wire.claim_messages import (
    RequestClaim,
    decode_activate_claim,
    decode_claim_only,
    decode_deactivate_reply,
    decode_request_claim,
    decode_request_claim_reply,
    encode_activate_claim,
    encode_deactivate_reply,
    encode_request_claim,
    encode_request_claim_reply,
)
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.commands import Reply
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import unframe_plain

STARTD = 2673
REQUEST, ACTIVATE, JOB_DONE, RELEASE = 15609, 1163, 28965, 28199  # client ports in job1


def _claim() -> str:
    message = unframe_plain(stream("job1.pcap", 30715, 9819))[1]
    claim: str = to_classad(decode_ad(Decoder(message)))["ClaimId"]
    return claim


def _conversation(port: int) -> tuple[list[bytes], list[bytes]]:
    return decrypt_conversation("job1.pcap", port, STARTD, claim_session(_claim()).key)


def _dec(payload: bytes) -> Decoder:
    return Decoder(payload, encrypted=True)


def test_request_claim_from_the_real_schedd() -> None:
    (payload,), _ = _conversation(REQUEST)
    req = decode_request_claim(_dec(payload))
    assert req.claim_id == _claim()
    job = dict(req.job_ad)
    assert job["Owner"] == '"alice"'
    assert job["_condor_SEND_CLAIMED_AD"] == "true"  # the schedd wants the slot ad back
    assert req.schedd_address.endswith("sock=schedd_32201_ba75>")
    assert (req.alive_interval, req.extra_claims) == (300, ())
    assert encode_request_claim(Encoder(encrypted=True), req).payload() == payload
    assert _claim()[-64:] not in repr(req)


def test_partitionable_reply_from_the_real_startd() -> None:
    _, (payload,) = _conversation(REQUEST)
    reply = decode_request_claim_reply(_dec(payload))
    assert reply.status == Reply.OK
    (slot,) = reply.claimed
    assert slot.claim_id == _claim()
    assert dict(slot.ad)["Name"] == '"slot1_1@vm"'
    assert reply.leftover is not None
    assert dict(reply.leftover.ad)["Name"] == '"slot1@vm"'
    assert reply.leftover.claim_id.split("#")[2] == "10"
    assert encode_request_claim_reply(Encoder(encrypted=True), reply).payload() == payload


def test_activate_claim_from_the_real_shadow() -> None:
    client, server = _conversation(ACTIVATE)
    activate = decode_activate_claim(_dec(client[0]))
    assert activate.claim_id == _claim()
    assert activate.starter_version == 2
    assert dict(activate.job_ad)["Cmd"] == '"/bin/echo"'
    assert encode_activate_claim(Encoder(encrypted=True), activate).payload() == client[0]
    assert _dec(server[0]).get_int() == Reply.OK


def test_job_done_and_release_from_the_real_shadow_and_schedd() -> None:
    (done,), (answer,) = _conversation(JOB_DONE)
    assert decode_claim_only(_dec(done), "DEACTIVATE_CLAIM_JOB_DONE") == _claim()
    assert decode_deactivate_reply(_dec(answer)) is True
    assert encode_deactivate_reply(Encoder(encrypted=True), True).payload() == answer
    (release,), replies = _conversation(RELEASE)
    assert decode_claim_only(_dec(release), "RELEASE_CLAIM") == _claim()
    assert replies == []  # RELEASE_CLAIM has no reply


def test_static_slot_reply_and_refusal() -> None:
    for status in (Reply.OK, Reply.NOT_OK):
        wire = Encoder(encrypted=True).put_int(status).payload()
        reply = decode_request_claim_reply(_dec(wire))
        assert (reply.status, reply.claimed, reply.leftover) == (status, (), None)
        assert encode_request_claim_reply(Encoder(encrypted=True), reply).payload() == wire


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (Encoder(encrypted=True).put_int(9).payload(), "reply code 9"),
        (Encoder(encrypted=True).put_int(7).payload(), "message ends"),
    ],
)
def test_bad_replies_are_refused(payload: bytes, problem: str) -> None:
    with pytest.raises(RemoteProtocolError, match=problem):
        decode_request_claim_reply(_dec(payload))


def test_request_claim_with_absurd_extra_claims_is_refused() -> None:
    req = RequestClaim("c", [("A", "1")], "<s:1>", 300)
    payload = encode_request_claim(Encoder(encrypted=True), req).payload()
    bad = payload[:-8] + (1 << 40).to_bytes(8, "big")
    with pytest.raises(RemoteProtocolError, match="extra claims"):
        decode_request_claim(_dec(bad))


def test_request_claim_without_the_extra_claims_count() -> None:
    # A schedd that does not know the startd's version and has no extra claims leaves
    # the count out (seen from the real schedd claiming execd's slot).
    req = RequestClaim("c", [("A", "1")], "<s:1>", 300)
    payload = encode_request_claim(Encoder(encrypted=True), req).payload()
    assert decode_request_claim(_dec(payload[:-8])) == req


PREEMPTED = ("<127.0.0.1:9618>#1700000000#7#[Integrity=\"YES\";]" + "ab" * 32,
             "<127.0.0.1:9618>#1700000000#8#[Integrity=\"YES\";]" + "cd" * 32)


def test_request_claim_preempting_dslots_carries_their_claim_ids() -> None:
    """ALLOW_PSLOT_PREEMPTION: after the alive interval the schedd puts the number of
    d-slot claims to preempt, then each id (put_secret: in an encrypted stream, a string
    like any other). The real schedd's request with two of them in place of its 0."""
    (payload,), _ = _conversation(REQUEST)
    assert payload[-8:] == (0).to_bytes(8, "big")
    with_claims = Encoder(encrypted=True).put_int(2)
    for claim in PREEMPTED:
        with_claims.put_string(claim)
    req = decode_request_claim(_dec(payload[:-8] + with_claims.payload()))
    assert req.extra_claims == PREEMPTED
    assert req.claim_id == _claim() and req.alive_interval == 300
    assert "ab" * 32 not in repr(req) and "cd" * 32 not in repr(req)
    assert encode_request_claim(Encoder(encrypted=True), req).payload() \
        == payload[:-8] + with_claims.payload()  # fmt: skip


@pytest.mark.parametrize("count", [3, -1])
def test_request_claim_with_fewer_preempting_claims_than_announced_is_refused(
        count: int) -> None:  # fmt: skip
    req = RequestClaim("c", [("A", "1")], "<s:1>", 300, PREEMPTED)
    payload = encode_request_claim(Encoder(encrypted=True), req).payload()
    counted = Encoder(encrypted=True).put_int(2).payload()
    bad = payload.replace(counted, Encoder(encrypted=True).put_int(count).payload(), 1)
    with pytest.raises(RemoteProtocolError):
        decode_request_claim(_dec(bad))
