"""What an execute point sends the schedd: ALIVE, the claim keep-alive, and
RELEASE_CLAIM when it ends a claim itself (preemption, vacate, drain).

The startd sends every claim's schedd an ALIVE (441) every lease/3 while no starter
runs: on the claim id's own session, the payload is the claim id (secret); the schedd
answers its ALIVE_INTERVAL, or -1 when it no longer knows the claim (the startd then
releases it). A schedd that never had the claim's session answers SID_NOT_FOUND instead
(SessionNotFoundError): one that does not use claim sessions at all
(SEC_ENABLE_MATCH_PASSWORD_AUTHENTICATION = False) is then asked again on a session
execd authenticates itself (FS or its IDTOKEN), as HTCondor's startd does for a claim
without a session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from execd.wire.channel import Channel
from execd.wire.claim_session import claim_session
from execd.wire.commands import Command
from execd.wire.security import (
    ClientSecurity,
    SessionNotFoundError,
    claim_client_session,
    connect,
    start_command,
)
from execd.wire.sinful import Sinful

T = TypeVar("T")

UNKNOWN_CLAIM = -1


async def send_alive(schedd: Sinful, claim_id: str, security: ClientSecurity, *,
                     fallback: bool = True) -> int:  # fmt: skip
    """The schedd's alive interval for this claim, or UNKNOWN_CLAIM.

    fallback=False: on the claim's session only (SessionNotFoundError where it has none)."""

    async def answer(channel: Channel) -> int:
        dec = channel.decoder(await channel.recv())
        interval = dec.get_int32("ALIVE answer")
        dec.finish("ALIVE answer")
        return interval

    return await _claim_command(schedd, claim_id, security, Command.ALIVE, answer=answer,
                                fallback=fallback)  # fmt: skip


async def send_release(schedd: Sinful, claim_id: str, security: ClientSecurity) -> None:
    """Tell the schedd the startd ended this claim (HTCondor's Claim::vacate): RELEASE_CLAIM
    with the claim id, no answer."""

    async def no_answer(_channel: Channel) -> None:
        return None

    await _claim_command(schedd, claim_id, security, Command.RELEASE_CLAIM, answer=no_answer,
                         fallback=True)  # fmt: skip


async def _claim_command(schedd: Sinful, claim_id: str, security: ClientSecurity,
                         command: Command, *, answer: Callable[[Channel], Awaitable[T]],
                         fallback: bool, on_claim_session: bool = True) -> T:  # fmt: skip
    """Send `command` with the claim id on the claim's own session; where the schedd has
    no such session (and `fallback`), again on one execd authenticates."""
    session = claim_client_session(claim_session(claim_id), schedd) if on_claim_session \
        else None  # fmt: skip
    try:
        channel = await connect(schedd, timeout_s=security.timeout_s)
        try:
            await start_command(channel, schedd, command, security, session=session)
            await channel.send(channel.encoder().put_string(claim_id).payload())
            return await answer(channel)
        finally:
            await channel.close()
    except SessionNotFoundError:
        if not (fallback and on_claim_session):
            raise
    return await _claim_command(schedd, claim_id, security, command, answer=answer,
                                fallback=False, on_claim_session=False)  # fmt: skip
