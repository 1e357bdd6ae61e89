"""The payloads of the startd's claim commands (after the security handshake), as the
real schedd, shadow and startd exchange them (decrypted from job1.pcap in the tests).

- REQUEST_CLAIM (442): claim id (secret), job ad, schedd address, int alive interval,
  int n + n extra claim ids (n left out entirely by a schedd that does not know the
  startd's version and has none). Reply: zero or more (7 SLOT_AD, claim id, claimed slot ad),
  then 1 OK / 0 NOT_OK, or (5 LEFTOVERS_2, the partitionable slot's new claim id, its
  leftover ad) or the older (3 LEFTOVERS, ...).
- ACTIVATE_CLAIM (444): claim id, int starter version, job ad -> int 1 OK, 0 NOT_OK or
  2 TRY_AGAIN; the connection then carries the starter's remote system calls.
- DEACTIVATE_CLAIM (403), _FORCIBLY (404), _JOB_DONE (413): claim id -> ad {Start}
  (whether the claim can take another job); RELEASE_CLAIM (443), SUSPEND/CONTINUE,
  VACATE_CLAIM(_FAST): claim id only.
Claim ids are secrets: dataclasses keep them out of repr().
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import WireAd, decode_ad_lines, encode_ad
from execd.wire.commands import Reply
from execd.wire.encoding import Decoder, Encoder

# A schedd asks for a handful of extra claims at most; a count beyond this is garbage.
MAX_EXTRA_CLAIMS = 10_000
AdLines = list[tuple[str, str]]


@dataclass(frozen=True)
class RequestClaim:
    claim_id: str = field(repr=False)
    job_ad: AdLines
    schedd_address: str
    alive_interval: int
    extra_claims: tuple[str, ...] = field(default=(), repr=False)


def decode_request_claim(dec: Decoder) -> RequestClaim:
    claim_id = dec.get_string("claim id")
    job_ad = decode_ad_lines(dec, "job ad")
    schedd = dec.get_string("schedd address")
    alive = dec.get_int32("alive interval")
    # A schedd that does not know the startd's version (a claim id without ShortVersion
    # in its session info) sends no count at all when it has no extra claims.
    count = 0 if dec.at_end() else dec.get_int("number of extra claims")
    if not 0 <= count <= MAX_EXTRA_CLAIMS:
        raise RemoteProtocolError(f"REQUEST_CLAIM announces {count} extra claims")
    extra = tuple(dec.get_string(f"extra claim {i}") for i in range(count))
    dec.finish("REQUEST_CLAIM")
    return RequestClaim(claim_id, job_ad, schedd, alive, extra)


def encode_request_claim(enc: Encoder, req: RequestClaim) -> Encoder:
    encode_ad(enc.put_string(req.claim_id), req.job_ad)
    enc.put_string(req.schedd_address).put_int(req.alive_interval).put_int(len(req.extra_claims))
    for claim in req.extra_claims:
        enc.put_string(claim)
    return enc


@dataclass(frozen=True)
class SlotClaim:
    """A claim id and the ad of the slot it claims."""

    claim_id: str = field(repr=False)
    ad: AdLines


@dataclass(frozen=True)
class RequestClaimReply:
    status: Reply  # OK or NOT_OK (OK when there are leftovers)
    claimed: tuple[SlotClaim, ...] = ()
    leftover: SlotClaim | None = None


def encode_request_claim_reply(enc: Encoder, reply: RequestClaimReply) -> Encoder:
    for slot in reply.claimed:
        enc.put_int(Reply.REQUEST_CLAIM_SLOT_AD).put_string(slot.claim_id)
        encode_ad(enc, slot.ad)
    if reply.leftover is not None:
        enc.put_int(Reply.REQUEST_CLAIM_LEFTOVERS_2).put_string(reply.leftover.claim_id)
        return encode_ad(enc, reply.leftover.ad)
    return enc.put_int(reply.status)


def decode_request_claim_reply(dec: Decoder) -> RequestClaimReply:
    claimed: list[SlotClaim] = []
    code = dec.get_int("REQUEST_CLAIM reply")
    while code == Reply.REQUEST_CLAIM_SLOT_AD:
        claim = dec.get_string("claimed slot's claim id")
        claimed.append(SlotClaim(claim, decode_ad_lines(dec, "claimed slot ad")))
        code = dec.get_int("REQUEST_CLAIM reply")
    leftover = None
    if code in (Reply.REQUEST_CLAIM_LEFTOVERS, Reply.REQUEST_CLAIM_LEFTOVERS_2):
        claim = dec.get_string("leftover claim id")
        leftover = SlotClaim(claim, decode_ad_lines(dec, "leftover slot ad"))
        code = Reply.OK
    if code not in (Reply.OK, Reply.NOT_OK):
        raise RemoteProtocolError(f"REQUEST_CLAIM reply code {code} is not one HTCondor sends")
    dec.finish("REQUEST_CLAIM reply")
    return RequestClaimReply(Reply(code), tuple(claimed), leftover)


@dataclass(frozen=True)
class ActivateClaim:
    claim_id: str = field(repr=False)
    starter_version: int
    job_ad: AdLines


def decode_activate_claim(dec: Decoder) -> ActivateClaim:
    claim_id = dec.get_string("claim id")
    version = dec.get_int32("starter version")
    job_ad = decode_ad_lines(dec, "job ad")
    dec.finish("ACTIVATE_CLAIM")
    return ActivateClaim(claim_id, version, job_ad)


def encode_activate_claim(enc: Encoder, req: ActivateClaim) -> Encoder:
    return encode_ad(enc.put_string(req.claim_id).put_int(req.starter_version), req.job_ad)


def decode_claim_only(dec: Decoder, command: str) -> str:
    """The payload of DEACTIVATE_CLAIM*, RELEASE_CLAIM, SUSPEND/CONTINUE, VACATE_CLAIM*."""
    claim_id = dec.get_string("claim id")
    dec.finish(command)
    return claim_id


def encode_deactivate_reply(enc: Encoder, claim_still_usable: bool) -> Encoder:
    return encode_ad(enc, {"Start": "true" if claim_still_usable else "false"})


def decode_deactivate_reply(dec: Decoder) -> bool:
    ad: WireAd = dict(decode_ad_lines(dec, "DEACTIVATE_CLAIM reply"))
    dec.finish("DEACTIVATE_CLAIM reply")
    start = ad.get("Start", "false").strip().lower()
    if start not in ("true", "false"):
        raise RemoteProtocolError(f"DEACTIVATE_CLAIM reply has Start = {start!r}")
    return start == "true"
