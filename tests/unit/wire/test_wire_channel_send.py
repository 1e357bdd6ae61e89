"""Channel.send's timeout bounds a stall, not a whole message (as condor's code_bytes:
it fails only when nothing moves for the socket's timeout). A Chirp putfile of several
MiB to a shadow that reads slowly but steadily goes through whatever the total time;
a shadow that stops reading fails the send once nothing moved for timeout_s. Real
socket pairs."""

from __future__ import annotations

import asyncio
import time

import pytest
from wire_pairs import channel_pair

from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink

BOUND_S = 1.0  # the channel's send timeout (the activation socket's is 20 s)
SIZE = 4 * 1024 * 1024  # at 2.5 MB/s: ~1.7 s, well over BOUND_S
PIECE = 256 * 1024


def _link(channel: Channel) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=600.0, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


def test_a_putfile_longer_than_the_send_timeout_goes_through_while_the_shadow_reads() -> None:
    asyncio.run(_slow_reader())


async def _slow_reader() -> None:
    ours, theirs = await channel_pair(timeout_s=BOUND_S)
    link = _link(ours)
    calls = ShadowFileCalls(ours, timeout_s=300.0)
    calls.attach(link)
    got = 0

    async def shadow() -> None:  # takes the bytes 256 KiB every 0.1 s: always moving
        nonlocal got
        await theirs.recv(timeout_s=5)
        await theirs.send(theirs.encoder().put_int(7).payload())
        while got < SIZE:
            chunk = await theirs.reader.read(PIECE)
            if not chunk:
                return
            got += len(chunk)
            await asyncio.sleep(0.1)
        await theirs.send(theirs.encoder().put_int(SIZE).payload())

    async def data(fd: int) -> bytes:
        return b"x" * SIZE

    peer = asyncio.create_task(shadow())
    started = time.monotonic()
    assert await calls.putfile("f", 0o644, SIZE, data) == SIZE
    assert time.monotonic() - started > BOUND_S  # it did outlast the bound
    await asyncio.wait_for(peer, 10)
    assert got >= SIZE
    assert not link.disconnected.is_set()
    assert not ours.writer.is_closing()
    await ours.close()
    await theirs.close()


def test_a_send_fails_once_the_peer_stopped_reading_for_the_timeout() -> None:
    asyncio.run(_stopped_reader())


async def _stopped_reader() -> None:
    ours, theirs = await channel_pair(timeout_s=BOUND_S)
    reading = True

    async def peer() -> None:  # reads a little, then nothing more
        for _ in range(4):
            await theirs.reader.read(PIECE)
            await asyncio.sleep(0.05)
        nonlocal reading
        reading = False

    task = asyncio.create_task(peer())
    started = time.monotonic()
    with pytest.raises(RemoteProtocolError, match="sending to a failed"):
        await ours.send(b"x" * SIZE)
    took = time.monotonic() - started
    assert not reading
    assert BOUND_S <= took < BOUND_S + 3.0
    await task
    ours.writer.transport.abort()  # what is left unsent would wait for a reader
    await ours.close()
    await theirs.close()


def test_a_send_that_timed_out_says_so() -> None:
    asyncio.run(_timed_out_message())


async def _timed_out_message() -> None:
    ours, theirs = await channel_pair(timeout_s=0.2)  # nobody reads theirs
    with pytest.raises(RemoteProtocolError) as failed:
        await ours.send(b"x" * SIZE)
    assert str(failed.value) == "sending to a failed: timed out"
    ours.writer.transport.abort()
    await ours.close()
    await theirs.close()


def test_a_syscall_send_waits_for_the_syscall_timeout_not_the_channels() -> None:
    asyncio.run(_paused_reader())


async def _paused_reader() -> None:
    """condor_starter's syscall_sock->timeout(STARTER_UPLOAD_TIMEOUT) bounds its writes
    too: a shadow that stops reading 2 s (over the channel's 0.5 s, under the calls'
    5 s) in a putfile's bytes is waited for."""
    ours, theirs = await channel_pair(timeout_s=0.5)
    link = _link(ours)
    calls = ShadowFileCalls(ours, timeout_s=5.0)
    calls.attach(link)

    async def shadow() -> None:
        await theirs.recv(timeout_s=5)
        await theirs.send(theirs.encoder().put_int(7).payload())
        await asyncio.sleep(2.0)  # stops reading
        await theirs.recv(timeout_s=5)
        await theirs.send(theirs.encoder().put_int(SIZE).payload())

    async def data(fd: int) -> bytes:
        return b"x" * SIZE

    peer = asyncio.create_task(shadow())
    assert await calls.putfile("f", 0o644, SIZE, data) == SIZE
    await asyncio.wait_for(peer, 10)
    assert not link.disconnected.is_set()
    assert not ours.writer.is_closing()
    await ours.close()
    await theirs.close()


def test_a_failed_send_drops_the_connection_and_its_unsent_bytes() -> None:
    asyncio.run(_dropped_after_failure())


async def _dropped_after_failure() -> None:
    """condor drops a socket whose write failed; a graceful close would keep the unsent
    bytes (up to a 32 MiB message) and the descriptor until a peer that stopped
    reading reads again."""
    ours, theirs = await channel_pair(timeout_s=0.3)  # nobody reads theirs
    with pytest.raises(RemoteProtocolError, match="timed out"):
        await ours.send(b"x" * (8 * 1024 * 1024))
    transport = ours.writer.transport
    assert transport.get_write_buffer_size() == 0
    assert transport.is_closing()
    await ours.close()

    async def to_the_end() -> None:  # what the kernel held, then the end
        while await theirs.reader.read(1 << 20):
            pass

    await asyncio.wait_for(to_the_end(), 5)
    await theirs.close()
