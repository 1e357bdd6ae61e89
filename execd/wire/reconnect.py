"""The shadow's reconnect: the two CA_CMD messages (condor_commands.h CA_CMD = 1200).

After the schedd restarts mid-job, the new shadow finds the starter and takes over its
syscall socket (condor_shadow.V6.1/remoteresource.cpp; condor_startd.V6/command.cpp
caLocateStarter; condor_starter.V6.1/jic_shadow.cpp JICShadow::reconnect). Both go as
CA_CMD, authenticated by resuming the claim id's security session; after the handshake
one request ad, one reply ad:

- to the startd: {Command = "CA_LOCATE_STARTER", GlobalJobId, ClaimId, ScheddIpAddr}
  -> {Result = "Success", StarterIpAddr, ...}, or {Result = "Failure", ErrorString}
  (the shadow gives up on the job: "Job not found at execution machine");
- to that starter: {Command = "CA_RECONNECT_JOB", ShadowIpAddr, ShadowVersion,
  UidDomain, TransferKey, TransferSocket} -> the starter's info ad (as in
  register_starter_info) with {Result = "Success"}; the same connection then carries
  the syscalls, and the starter asks get_sec_session_info again for the new shadow's
  file transfer session.

Requests carry MyType "Command" / TargetType "Reply", replies the other way round plus
CondorVersion and CondorPlatform (classad_command_util.cpp sendCAReply). Pinned to the
real shadow's bytes in tests/unit/wire/test_wire_reconnect.py.

execd's starter side lives in the daemon, so the starter address execd answers with is
its own command address, and both commands arrive at the same server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.security import CONDOR_VERSION

CA_LOCATE_STARTER = "CA_LOCATE_STARTER"
CA_RECONNECT_JOB = "CA_RECONNECT_JOB"
CONDOR_PLATFORM = "$CondorPlatform: X86_64-Linux execd $"
# getCAResultString (command_strings.h), the ones execd sends or reads
SUCCESS = "Success"
FAILURE = "Failure"
NOT_AUTHORIZED = "NotAuthorized"
INVALID_REQUEST = "InvalidRequest"


@dataclass(frozen=True)
class LocateStarter:
    """CA_LOCATE_STARTER: where is the starter of this job under this claim?"""

    global_job_id: str
    claim_id: str = field(repr=False)
    schedd_address: str = ""


@dataclass(frozen=True)
class ReconnectJob:
    """CA_RECONNECT_JOB: the new shadow's address and its file transfer endpoint."""

    shadow_address: str
    shadow_version: str
    uid_domain: str
    transfer_socket: str
    transfer_key: str = field(repr=False)


CaRequest = LocateStarter | ReconnectJob


def _str(values: Mapping[str, Any], name: str, what: str, *, required: bool = True) -> str:
    value = values.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise RemoteProtocolError(f"{what} request has no string {name}")
    return value


def decode_ca_request(dec: Decoder) -> CaRequest:
    """The request ad after CA_CMD's handshake; RemoteProtocolError naming what is wrong
    (a missing attribute, a command execd does not serve)."""
    ad = to_classad(decode_ad(dec, "CA_CMD request ad"))
    dec.finish("CA_CMD request")
    values = {key: ad[key] for key in ad}
    command = values.get("Command")
    if command == CA_LOCATE_STARTER:
        return LocateStarter(_str(values, "GlobalJobId", command),
                             _str(values, "ClaimId", command),
                             _str(values, "ScheddIpAddr", command, required=False))  # fmt: skip
    if command == CA_RECONNECT_JOB:
        return ReconnectJob(_str(values, "ShadowIpAddr", command),
                            _str(values, "ShadowVersion", command, required=False),
                            _str(values, "UidDomain", command, required=False),
                            _str(values, "TransferSocket", command, required=False),
                            _str(values, "TransferKey", command, required=False))  # fmt: skip
    raise RemoteProtocolError(f"CA_CMD command {command!r} is not served here")


def encode_ca_request(enc: Encoder, request: CaRequest) -> Encoder:
    """What the shadow sends (execd's tests play the shadow with it), in its order."""
    values: dict[str, Any] = {"MyType": "Command"}
    if isinstance(request, LocateStarter):
        values |= {"ClaimId": request.claim_id, "Command": CA_LOCATE_STARTER,
                   "TargetType": "Reply", "GlobalJobId": request.global_job_id}  # fmt: skip
        if request.schedd_address:
            values["ScheddIpAddr"] = request.schedd_address
    else:
        values |= {"Command": CA_RECONNECT_JOB, "UidDomain": request.uid_domain,
                   "TargetType": "Reply", "TransferKey": request.transfer_key,
                   "ShadowIpAddr": request.shadow_address,
                   "ShadowVersion": request.shadow_version,
                   "TransferSocket": request.transfer_socket}  # fmt: skip
    return encode_ad(enc, from_values(values))


def encode_ca_reply(enc: Encoder, result: str, ad: Mapping[str, str] | None = None, *,
                    error: str = "") -> Encoder:  # fmt: skip
    """A reply ad: `ad` (e.g. the starter's info) with Result, ErrorString on failure."""
    reply: WireAd = dict(ad or {})
    extra: dict[str, Any] = {"Result": result}
    if error:
        extra["ErrorString"] = error
    extra |= {"MyType": "Reply", "TargetType": "Command", "CondorVersion": CONDOR_VERSION,
              "CondorPlatform": CONDOR_PLATFORM}  # fmt: skip
    reply.update(from_values(extra))
    return encode_ad(enc, reply)


@dataclass(frozen=True)
class CaReply:
    result: str
    error: str
    ad: WireAd

    @property
    def ok(self) -> bool:
        return self.result == SUCCESS


def decode_ca_reply(dec: Decoder) -> CaReply:
    ad = decode_ad(dec, "CA_CMD reply ad")
    dec.finish("CA_CMD reply")
    values = to_classad(ad)
    result = values.get("Result")
    if not isinstance(result, str):
        raise RemoteProtocolError("CA_CMD reply has no string Result")
    error = values.get("ErrorString")
    return CaReply(result, error if isinstance(error, str) else "", ad)
