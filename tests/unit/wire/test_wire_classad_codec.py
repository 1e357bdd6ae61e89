"""Old-syntax ClassAds on the wire: real ads from the captures decode and re-encode to
the same bytes; private attributes never leave in a public ad or in clear."""

from __future__ import annotations

import pytest
from wire_captures import stream

from execd.errors import LocalProtocolError, RemoteProtocolError
from execd.wire.classad_codec import (
    decode_ad,
    decode_ad_lines,
    encode_ad,
    from_values,
    is_private,
    public_part,
    to_classad,
)
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import unframe_plain


def _message(name: str, sport: int, dport: int, index: int) -> bytes:
    return unframe_plain(stream(name, sport, dport))[index]


def test_client_policy_ad_round_trips_byte_for_byte() -> None:
    message = _message("pyupdate.pcap", 5268, 2673, 1)
    dec = Decoder(message)
    assert dec.get_int() == 60010  # DC_AUTHENTICATE
    ad = decode_ad(dec)
    dec.finish()
    assert len(ad) == 17
    assert ad["Command"] == "0"  # UPDATE_STARTD_AD
    assert ad["AuthMethods"] == '"FS"'
    assert ad["NegotiatedSession"] == "true"
    assert ad["ECDHPublicKey"].startswith('"BA8/xKrX')
    assert encode_ad(Encoder().put_int(60010), ad).payload() == message


def test_server_policy_ad_round_trips_and_converts() -> None:
    message = _message("pyupdate.pcap", 2673, 5268, 0)
    dec = Decoder(message)
    ad = decode_ad(dec)
    dec.finish()
    assert encode_ad(Encoder(), ad).payload() == message
    parsed = to_classad(ad)
    assert parsed["Enact"] == "YES"
    assert parsed["SessionLease"] == 3600
    assert parsed["NegotiatedSession"] is True
    assert parsed["CryptoMethods"] == "AES"


def test_resume_request_and_answer() -> None:
    request = Decoder(_message("job1.pcap", 12759, 2673, 1))
    assert request.get_int() == 60010
    ad = to_classad(decode_ad(request))
    assert (ad["UseSession"], ad["Command"]) == ("YES", 421)
    assert ad["Sid"].startswith("family:")
    answer = Decoder(_message("job1.pcap", 2673, 12759, 0))
    reply = to_classad(decode_ad(answer))
    answer.finish()
    assert reply["ReturnCode"] == "AUTHORIZED"
    assert len(reply["Nonce"]) == 44  # base64 of 33 random bytes


def test_secret_marker_from_a_real_startd() -> None:
    # job1.pcap: the startd hands its starter the claim id on a local socket: the private
    # ClaimId travels as "ZKM" then its line; SplitClaimId is not private.
    message = _message("job1.pcap", 30715, 9819, 1)
    assert message[8:12] == b"ZKM\0"  # right after the count
    dec = Decoder(message)
    ad = decode_ad(dec)
    dec.finish()
    assert list(ad) == ["ClaimId", "SplitClaimId"]
    assert ad["ClaimId"].startswith('"<127.0.0.1:2673?')
    assert encode_ad(Encoder(), ad, mark_secrets=True).payload() == message
    with pytest.raises(LocalProtocolError, match="private attribute ClaimId"):
        encode_ad(Encoder(), ad)


def test_large_real_job_ad_round_trips() -> None:
    message = _message("job1.pcap", 30715, 9819, 0)
    dec = Decoder(message)
    lines = decode_ad_lines(dec)
    # A dynamic slot's ad chained over its parent's: 181 lines, two names twice.
    assert len(lines) == 181
    ad = dict(lines)
    assert len(ad) == 179 and ad["Name"] == '"slot1_1@vm"'
    tail = dec.remaining
    assert encode_ad(Encoder(), lines).payload() == message[: len(message) - tail]
    assert decode_ad(Decoder(message)) == ad  # the later duplicate wins
    assert to_classad(ad)["Cpus"] == 1


def test_public_ad_leaves_private_attributes_out() -> None:
    ad = from_values({"Name": "slot1@x", "ClaimId": "s3cret#1", "capability": "c#2",
                      "_condor_privThing": "p", "Cpus": 4})  # fmt: skip
    payload = encode_ad(Encoder(encrypted=True), ad, exclude_private=True).payload()
    assert b"s3cret" not in payload and b"c#2" not in payload and b"privThing" not in payload
    back = decode_ad(Decoder(payload, encrypted=True))
    assert back == public_part(ad) == {"Name": '"slot1@x"', "Cpus": "4"}
    full = decode_ad(Decoder(encode_ad(Encoder(encrypted=True), ad).payload(), encrypted=True))
    assert full == ad  # on an encrypted connection the private ad travels whole


def test_private_attribute_names() -> None:
    for name in ("ClaimId", "claimid", "Capability", "ChildClaimIds", "ClaimIdList",
                 "ClaimIds", "TransferKey", "_condor_privWhatever", "_CONDOR_PRIVx"):  # fmt: skip
        assert is_private(name), name
    for name in ("Name", "SplitClaimId", "PublicClaimId", "condor_priv"):
        assert not is_private(name), name


def test_values_use_the_old_syntax_unparser() -> None:
    ad = from_values({"S": 'a"b\\c', "L": [1, "x"], "F": 1.5, "B": False})
    assert ad == {"S": '"a\\"b\\c"', "L": '{ 1,"x" }', "F": "1.5", "B": "false"}
    assert to_classad(ad)["S"] == 'a"b\\c'


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (["no equals sign"], "not 'Attr = expression'"),
        (["= 3"], "not 'Attr = expression'"),
        (["1bad = 3"], "not 'Attr = expression'"),
        (["A = "], "not 'Attr = expression'"),
    ],
)
def test_malformed_lines_are_refused(lines: list[str], problem: str) -> None:
    enc = Encoder().put_int(len(lines))
    for line in lines:
        enc.put_string(line)
    with pytest.raises(RemoteProtocolError, match=problem):
        decode_ad(Decoder(enc.put_string("").put_string("").payload()))


def test_bad_counts_and_unparsable_expressions() -> None:
    with pytest.raises(RemoteProtocolError, match="announces -1 attributes"):
        decode_ad(Decoder(Encoder().put_int(-1).payload()))
    with pytest.raises(RemoteProtocolError, match="announces 4611686018427387904"):
        decode_ad(Decoder(Encoder().put_int(1 << 62).payload()))
    with pytest.raises(RemoteProtocolError, match="attribute A does not parse"):
        to_classad({"A": "1 +"})
    with pytest.raises(RemoteProtocolError, match="message ends"):
        decode_ad(Decoder(Encoder().put_int(2).put_string("A = 1").payload()))
