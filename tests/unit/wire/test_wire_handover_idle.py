"""When a restart in place hands the shadow's connection to the next image
(execd.wire.handover.hand_over): only between messages, and nothing of this image's is
sent on it afterwards. Shadows on real socket pairs."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest
from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import LSEEK
from execd.wire.handover import hand_over
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import MessageChannel, ShadowConnectionLostError
from execd.wire.streamed_output import StreamedOutput

SEC_SESSION_INFO = 288


def _link(channel: Channel) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=600.0, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


def _options(handed: list[MessageChannel | None]) -> ShadowOptions:
    def handover(channel: MessageChannel | None, proxy: Any, streams: Any,
                 transfer: Any) -> bool:  # fmt: skip
        handed.append(channel)
        return True

    return ShadowOptions(handover=handover)


def test_a_reconnect_whose_sessions_are_not_answered_yet_is_not_handed_over() -> None:
    asyncio.run(_handover_during_the_reconnects_sessions())


async def _handover_during_the_reconnects_sessions() -> None:
    """The shadow reconnects; adopt_reconnect takes the new connection and sends
    get_sec_session_info, whose answer has not come when `execd restart` cancels the
    conversation: the connection is not handed over (the next image would read that
    answer as its own first call's); the next image waits for a reconnect instead."""
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    asked = asyncio.Event()

    async def new_shadow() -> None:  # reads the request, answers much later
        await new.recv(timeout_s=30)
        asked.set()
        await asyncio.sleep(3600)

    peer = asyncio.create_task(new_shadow())
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
    await asyncio.wait_for(asked.wait(), 5)
    assert calls.channel is fresh and not link.disconnected.is_set()
    handed: list[MessageChannel | None] = []
    assert hand_over(calls, link, _options(handed), None, StreamedOutput({}))
    assert handed == [None]
    link.close()
    for task in (peer, offered):
        task.cancel()
    await asyncio.gather(peer, offered, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()


def test_nothing_is_sent_on_a_connection_once_it_is_handed_over() -> None:
    asyncio.run(_call_after_the_handover())


async def _call_after_the_handover() -> None:
    """A call that comes after the handover (a stream's write, shielded from the
    conversation's cancel, that was waiting for the lock) is not sent on the
    connection, which is the next image's now: it fails as on a lost connection."""
    ours, theirs = await channel_pair()
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    handed: list[MessageChannel | None] = []
    assert hand_over(calls, link, _options(handed), None, StreamedOutput({}))
    assert handed == [ours]
    with pytest.raises(ShadowConnectionLostError, match="handed to the next image"):
        await asyncio.wait_for(calls.file_call(LSEEK, "lseek", 5, 0, 0, connection=0), 5)
    await ours.send(b"the next image's")  # what the shadow reads next is the next image's
    assert await asyncio.wait_for(theirs.recv(), 5) == b"the next image's"
    link.close()
    await ours.close()
    await theirs.close()


def test_a_reconnect_offered_but_not_taken_yet_is_the_one_handed_over() -> None:
    asyncio.run(_handover_between_offer_and_adopt())


async def _handover_between_offer_and_adopt() -> None:
    """The shadow reconnects and `execd restart` cancels the conversation before the
    reconnect is taken (offer() closing the old connection, adopt() not yet run): the
    reconnect's connection goes to the next image, which asks its sessions first; not
    the old one, closing (no connection at all: the shadow had to reconnect again)."""
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
    await asyncio.sleep(0)  # offer() runs to its close of the old connection
    assert link.offered and calls.idle and not link.disconnected.is_set()
    handed: list[MessageChannel | None] = []
    assert hand_over(calls, link, _options(handed), None, StreamedOutput({}))
    link.close()
    offered.cancel()
    await asyncio.gather(offered, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()
    assert handed == [fresh]  # before: the old, closing connection
