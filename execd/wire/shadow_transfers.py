"""Reaching the shadow's file transfer from the starter side (execd.wire.shadow): the
transfer socket and key of the job's shadow (the latest one, after a reconnect), the
file-transfer security session get_sec_session_info gave, and a tally of the bytes the
job's transfers moved (condor_starter's final BytesRecvd/BytesSent for its startd).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.claim_session import ClaimSession
from execd.wire.classad_codec import WireAd, to_classad
from execd.wire.crypto import hkdf_key
from execd.wire.filetransfer import FILETRANS_UPLOAD, TransferResult, TransferTally
from execd.wire.security import ClientSecurity, claim_client_session, connect, start_command
from execd.wire.session import Session
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import SecSessionInfo, ShadowSyscalls
from execd.wire.sinful import parse_sinful

log = get_logger("wire")
PEER_CLOSE_WAIT_S = 5.0


def job_values(ad: WireAd) -> dict[str, object]:
    parsed = to_classad(ad)
    return {k: parsed.get(k) for k in parsed}


def _filetrans_session(info: SecSessionInfo, address: str) -> Session:
    session = ClaimSession(sid=info.filetrans_id, key=hkdf_key(info.filetrans_key.encode()),
                           info={})  # fmt: skip
    return claim_client_session(session, parse_sinful(address))


@dataclass(frozen=True)
class Transfers:
    """How to reach the shadow's file transfer: its address, session, the job's key
    (those of the latest shadow, after a reconnect)."""

    calls: ShadowSyscalls
    link: ShadowLink
    job_wire: WireAd
    starter_address: str
    tally: TransferTally = field(default_factory=TransferTally)

    def endpoint(self) -> tuple[str, str, SecSessionInfo]:
        assert self.calls.sessions is not None, "get_sec_session_info first"
        if self.link.transfer is not None:
            return (*self.link.transfer, self.calls.sessions)
        job = job_values({"TransferSocket": self.job_wire.get("TransferSocket", '""'),
                       "TransferKey": self.job_wire.get("TransferKey", '""')})  # fmt: skip
        return str(job.get("TransferSocket") or ""), str(job.get("TransferKey") or ""), \
            self.calls.sessions  # fmt: skip

    async def run(self, command: int, work: Callable[[Channel], Awaitable[TransferResult]],
                  ) -> TransferResult:  # fmt: skip
        result = await _transfer(command, self, work)
        if command == FILETRANS_UPLOAD:  # the shadow uploads: the job's input
            self.tally.received += result.bytes
        else:
            self.tally.sent += result.bytes
        return result


async def _transfer(command: int, how: Transfers,
                    work: Callable[[Channel], Awaitable[TransferResult]],
                    ) -> TransferResult:  # fmt: skip
    address, key, info = how.endpoint()
    if not address:
        raise ProtocolError("job ad has no TransferSocket")
    sinful = parse_sinful(address)
    channel = await connect(sinful, client_name=f"STARTER {how.starter_address}")
    try:
        security = ClientSecurity(subsystem="STARTER")
        await start_command(channel, sinful, command, security,
                            session=_filetrans_session(info, address))  # fmt: skip
        await channel.send(channel.encoder().put_string(key).payload())
        result = await work(channel)
        # The shadow closes its end once its side of the transfer is done (about a
        # millisecond); waiting for that keeps our next syscall behind its transfer's
        # completion, so the user log has the transfer's end before what follows.
        with contextlib.suppress(TimeoutError, OSError):
            if await asyncio.wait_for(channel.reader.read(1), PEER_CLOSE_WAIT_S):
                log.warning("shadow_transfer_extra_bytes", peer=channel.peer)
        return result
    finally:
        await channel.close()
