"""ACTIVATE_CLAIM while the daemon restarts in place (execd.daemon.pool_commands): the
command server still serves until the job conversations are handed over, but a
conversation activated then would not be quiesced with the others; it is deferred with
CONDOR_TRY_AGAIN, which HTCondor's shadow answers by asking again a second later, 20
times (remoteresource.cpp activateClaim), so its job starts on the next image. A real
socket pair carries the request."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from wire_pairs import channel_pair

from execd.daemon.control import ControlError
from execd.daemon.pool_commands import PoolCommands
from execd.wire.claim_messages import ActivateClaim, encode_activate_claim
from execd.wire.commands import Command, Reply
from execd.wire.server import Peer

PEER = Peer(user="condor@pool", method="FS", sid="s", address="127.0.0.1:1")


class Jobs:
    """The claims: one lookup refused (what a slot without that claim answers)."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []

    def lookup(self, claim_id: str) -> Any:
        self.looked_up.append(claim_id)
        raise ControlError("unknown_claim", "no such claim")


def _activate(stopping: str | None) -> tuple[int, list[str]]:
    async def scenario() -> tuple[int, list[str]]:
        ours, theirs = await channel_pair()
        jobs = Jobs()
        commands = SimpleNamespace(daemon=SimpleNamespace(stopping=stopping, jobs=jobs))
        request = ActivateClaim("<127.0.0.1:9>#1#1#secret", 0, [("ClusterId", "1")])
        await theirs.send(encode_activate_claim(theirs.encoder(), request).payload())
        await asyncio.wait_for(PoolCommands.activate_claim(
            commands, ours, int(Command.ACTIVATE_CLAIM), PEER), 5)
        reply = theirs.decoder(await asyncio.wait_for(theirs.recv(), 5)).get_int32("reply")
        for channel in (ours, theirs):
            await channel.close()
        return reply, jobs.looked_up

    return asyncio.run(scenario())


def test_an_activation_while_restarting_in_place_is_deferred() -> None:
    """Before, it was served as at any time (here: looked up, and refused with NOT_OK for
    the fake's unknown claim; with a real claim its conversation began in the window)."""
    reply, looked_up = _activate("restart")
    assert reply == Reply.TRY_AGAIN
    assert looked_up == []  # not activated: no conversation begins in the old image


def test_otherwise_an_activation_is_served() -> None:
    reply, looked_up = _activate(None)
    assert reply == Reply.NOT_OK and looked_up == ["<127.0.0.1:9>#1#1#secret"]
