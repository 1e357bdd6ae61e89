"""A shadow call cancelled before its answer came (execd.wire.shadow_syscalls._once):
the job held or the conversation ending while an update or a stream's write waits for
the shadow. Its answer is read for nothing and the next call reads its own, on the same
connection: no reconnect, nothing written to the user log by it. Shadows on real
socket pairs, each answer numbered."""

from __future__ import annotations

import asyncio
import types

import pytest
from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import LSEEK, WRITE
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink

REGISTER_JOB_INFO = -81
ULOG = 284
SEC_SESSION_INFO = 288


class NumberingShadow:
    """Answers each call (but ulog, which gets none) with 1000 + its count, after
    `slow_s` for an update; reads nothing until `reading` is set."""

    def __init__(self, slow_s: float = 0.0) -> None:
        self.slow_s = slow_s
        self.seen: list[int] = []
        self.sizes: list[int] = []  # each write's byte count, as it arrived whole
        self.reading = asyncio.Event()
        self.reading.set()
        self.closed = False

    async def serve(self, channel: Channel) -> None:
        await self.reading.wait()
        while True:
            try:
                dec = channel.decoder(await channel.recv(timeout_s=30))
            except Exception:
                self.closed = True
                return
            number = dec.get_int()
            self.seen.append(number)
            if number == WRITE:
                dec.get_int()
                size = dec.get_int()
                self.sizes.append(len(dec.get_bytes(size)))
            if number == ULOG:
                continue
            if number == REGISTER_JOB_INFO:
                await asyncio.sleep(self.slow_s)
            enc = channel.encoder().put_int(1000 + len(self.seen))
            if number == SEC_SESSION_INFO:
                for _ in range(6):
                    enc.put_string("x")
            await channel.send(enc.payload())


def _link(channel: Channel, lease_s: float | None) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=lease_s, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


@pytest.mark.parametrize("lease_s", [None, 600.0])
def test_a_holds_ulog_after_an_update_cancelled_in_flight_goes_out_without_a_reconnect(
        lease_s: float | None) -> None:  # fmt: skip
    asyncio.run(_hold_after_a_cancelled_update(lease_s))


async def _hold_after_a_cancelled_update(lease_s: float | None) -> None:
    """A stream's hold cancels the job's update (register_job_info) before the shadow
    answers it; report_hold's ulog follows. It goes out on the same connection (no
    disconnect: the shadow would write 022/023 to the user log; without a lease the
    hold would be lost), after the update's answer, and the next call reads its own."""
    ours, theirs = await channel_pair()
    shadow = NumberingShadow(slow_s=0.3)
    peer = asyncio.create_task(shadow.serve(theirs))
    link = _link(ours, lease_s)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    update = asyncio.create_task(calls.register_job_info({}))
    while not shadow.seen:
        await asyncio.sleep(0.01)
    update.cancel()
    await asyncio.gather(update, return_exceptions=True)
    await asyncio.wait_for(calls.ulog({"MyType": '"x"'}), 5)
    assert not link.disconnected.is_set()
    assert await asyncio.wait_for(calls.file_call(LSEEK, "lseek", 5, 0, 0), 5) == 1003
    assert shadow.seen == [REGISTER_JOB_INFO, ULOG, LSEEK]
    assert not shadow.closed and link.connections == 0
    link.close()
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()


def test_a_call_cancelled_while_its_message_is_still_going_out_keeps_the_connection() -> None:
    asyncio.run(_cancelled_while_sending())


async def _cancelled_while_sending() -> None:
    """A stream's 8 MB write, the shadow not reading yet (the socket's buffers full:
    the send waits), is cancelled: the message still reaches the shadow whole and is
    answered, and the next call on the connection reads its own answer."""
    ours, theirs = await channel_pair()
    shadow = NumberingShadow()
    shadow.reading.clear()
    peer = asyncio.create_task(shadow.serve(theirs))
    link = _link(ours, 600.0)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    size = 8 << 20
    write = asyncio.create_task(calls.file_call(WRITE, "write", 5, size, b"x" * size))
    await asyncio.sleep(0.1)  # the send is waiting for the socket's buffers
    assert not write.done()
    write.cancel()
    await asyncio.gather(write, return_exceptions=True)
    shadow.reading.set()
    assert await asyncio.wait_for(calls.file_call(LSEEK, "lseek", 5, 0, 0), 5) == 1002
    assert shadow.seen == [WRITE, LSEEK] and shadow.sizes == [size]
    assert not link.disconnected.is_set() and not shadow.closed
    link.close()
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()


def test_a_cancelled_calls_answer_that_never_comes_gives_the_connection_up() -> None:
    asyncio.run(_answer_never_comes())


async def _answer_never_comes() -> None:
    """The shadow never answers the cancelled update (within timeout_s): the
    connection is given up (closed, the link disconnected), and the next call is made
    on the shadow's reconnect, never reading a late answer on the old one."""
    ours, theirs = await channel_pair()
    fresh, new = await channel_pair()
    silent = NumberingShadow(slow_s=3600.0)
    shadow = NumberingShadow()
    peers = [asyncio.create_task(silent.serve(theirs)), asyncio.create_task(shadow.serve(new))]
    link = _link(ours, 600.0)
    calls = ShadowFileCalls(ours, timeout_s=0.2)
    calls.attach(link)
    update = asyncio.create_task(calls.register_job_info({}))
    while not silent.seen:
        await asyncio.sleep(0.01)
    update.cancel()
    await asyncio.gather(update, return_exceptions=True)
    await asyncio.wait_for(link.disconnected.wait(), 5)
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
    await asyncio.wait_for(calls.register_job_info({}), 5)  # replayed after the reconnect
    assert shadow.seen == [SEC_SESSION_INFO, REGISTER_JOB_INFO]
    assert silent.seen == [REGISTER_JOB_INFO]
    link.close()
    for task in (*peers, offered):
        task.cancel()
    await asyncio.gather(*peers, offered, return_exceptions=True)
    for channel in (ours, theirs, fresh, new):
        await channel.close()
