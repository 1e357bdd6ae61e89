"""A shadow connection given up (execd.wire.shadow_syscalls.give_up): a call whose answer
does not come in time, putfile cut between its two messages. The connection is closed
(the shadow sees it gone and reconnects, as condor_starter's syscall_sock_disconnect)
and nothing more is read on it. And a call queued on a connection handed to the next
image fails quietly: no disconnect logged, no unretrieved task error. Shadows on real
socket pairs, each answer numbered."""

from __future__ import annotations

import asyncio
import gc
import types
from typing import Any

import pytest
from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import LSEEK
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import ShadowConnectionLostError

SEC_SESSION_INFO = 288
EVENT_NOTIFICATION = 304


def _link(channel: Channel) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=600.0, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


async def _answer(channel: Channel, number: int, rval: int) -> None:
    enc = channel.encoder().put_int(rval)
    if number == SEC_SESSION_INFO:
        for _ in range(6):
            enc.put_string("x")
    await channel.send(enc.payload())


def test_a_call_whose_answer_times_out_closes_the_connection_and_reads_no_late_answer() -> None:
    asyncio.run(_late_answer())


async def _late_answer() -> None:
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    link = _link(ours)
    calls = ShadowFileCalls(ours, timeout_s=0.3)
    calls.attach(link)
    old_saw: list[str] = []

    async def late_shadow() -> None:  # answers 1001 after the call's timeout, then reads on
        await old.recv(timeout_s=5)
        await asyncio.sleep(1.5)  # well after the call's 0.3 s, loaded or not
        try:
            await _answer(old, LSEEK, 1001)
            await old.recv(timeout_s=2)
            old_saw.append("another call")
        except Exception as exc:  # what the shadow sees is the result
            old_saw.append("open" if "within" in str(exc) else "closed")

    async def new_shadow() -> None:
        while True:
            dec = new.decoder(await new.recv(timeout_s=30))
            number = dec.get_int()
            await _answer(new, number, 2002 if number == EVENT_NOTIFICATION else 2000)

    peers = [asyncio.create_task(late_shadow()), asyncio.create_task(new_shadow())]
    with pytest.raises(ShadowConnectionLostError):
        await calls.file_call(LSEEK, "lseek", 5, 0, 0)
    await asyncio.wait_for(peers[0], 10)
    assert old_saw == ["closed"]  # before: the socket stayed open, no reconnect came
    assert link.disconnected.is_set()
    # a call made again after a reconnect (an lseek is not: it fails at once)
    second = asyncio.ensure_future(calls.event_notification({}))
    await asyncio.sleep(0.05)
    assert not second.done()  # waits for the reconnect, sends nothing on the old one
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offering = asyncio.ensure_future(link.offer(fresh, request))  # type: ignore[arg-type]
    assert await asyncio.wait_for(second, 5) == 2002  # its own answer, not the late 1001
    link.close()
    await asyncio.wait_for(offering, 5)
    peers[1].cancel()
    await asyncio.gather(*peers, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()


def test_a_call_queued_on_a_handed_over_connection_fails_quietly() -> None:
    asyncio.run(_retired_queued_write())


async def _retired_queued_write() -> None:
    errors: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda loop, context: errors.append(context["message"]))  # fmt: skip
    ours, theirs = await channel_pair()
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    warnings: list[dict[str, Any]] = []
    link_lost = link.lost
    link.lost = lambda reason: (warnings.append({"reason": str(reason)}),  # type: ignore[method-assign]
                                link_lost(reason))[1]
    async with calls.turns.lock:  # a call holds the lock; a stream's shielded write queues
        call = calls.owned(calls.file_call(LSEEK, "lseek", 5, 0, 0, connection=0))
        copy = asyncio.ensure_future(asyncio.shield(call))  # as OutputStream._call's
        await asyncio.sleep(0)
        copy.cancel()  # the conversation's cancel reaches the stream's copy
        calls.retire()
    await asyncio.wait({call})
    for channel in (ours, theirs):
        await channel.close()
    del copy, call
    gc.collect()
    await asyncio.sleep(0)
    assert errors == []  # before: "Task exception was never retrieved"
    assert warnings == [] and not link.disconnected.is_set()  # before: shadow_disconnected


def test_putfile_cancelled_before_its_bytes_gives_the_connection_up() -> None:
    asyncio.run(_putfile_cancelled())


async def _putfile_cancelled() -> None:
    ours, theirs = await channel_pair()
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    got: list[str] = []

    async def shadow() -> None:  # answers putfile's open, then waits for its bytes
        await theirs.recv(timeout_s=5)
        await _answer(theirs, 0, 7)
        try:
            await theirs.recv(timeout_s=2)
            got.append("a message taken for putfile's bytes")
        except Exception as exc:  # what the shadow sees is the result
            got.append("open" if "within" in str(exc) else "closed")

    peer = asyncio.create_task(shadow())
    opened = asyncio.Event()

    async def slow_data(fd: int) -> bytes:
        opened.set()
        await asyncio.sleep(30)
        return b"x" * 10

    putting = asyncio.ensure_future(calls.putfile("f", 0o644, 10, slow_data))
    await asyncio.wait_for(opened.wait(), 5)
    putting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await putting
    later = asyncio.ensure_future(calls.file_call(LSEEK, "lseek", 5, 0, 0))
    await asyncio.wait_for(peer, 10)
    assert got == ["closed"]  # before: the lseek went out and was read as the bytes
    later.cancel()
    link.close()
    await asyncio.gather(later, return_exceptions=True)
    for channel in (ours, theirs):
        await channel.close()
