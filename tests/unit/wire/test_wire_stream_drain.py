"""Streamed output after the job's exit (execd.wire.streamed_output's DRAIN_S): a
process that outlived the job and writes without end does not stream without end.
A real writer on the FIFO and a shadow on a socket pair."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import types
from pathlib import Path

import pytest
from test_wire_stream_hazards import NewShadow
from wire_pairs import channel_pair

from execd.wire import streamed_output
from execd.wire.job_runner import JobExit
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.ssh_sessions import JobShell
from execd.wire.streamed_output import StreamedOutput

DRAIN_S = 0.2


def test_a_writer_that_never_stops_after_the_job_exited_is_cut_off_after_the_drain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A process left by the job (no cgroup to kill it) writes to the FIFO all the time,
    so that a piece is always there to read: the stream still ends DRAIN_S after the
    job's exit (fsync, close), what was sent a prefix of what it wrote, and the job's
    exit stands."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", DRAIN_S)
    asyncio.run(_endless_writer(tmp_path))


async def _endless_writer(tmp_path: Path) -> None:
    ours, theirs = await channel_pair()
    shadow = NewShadow()
    peer = asyncio.create_task(shadow.serve(theirs))
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    streams = StreamedOutput.for_job(ShadowFileCalls(ours), {"Out": "out.txt", "StreamOut": True},
                                     sandbox, "j")  # fmt: skip
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    writer = os.open(fifo, os.O_WRONLY)
    stop = threading.Event()
    written = bytearray()

    def write_without_end() -> None:
        line = 0
        while not stop.is_set():
            piece = b"%09d\n" % line * 4096
            try:
                os.write(writer, piece)  # blocks while the pipe is full
            except OSError:
                return
            written.extend(piece)
            line += 1

    thread = threading.Thread(target=write_without_end, daemon=True)

    async def run() -> JobExit:
        streams.started()
        thread.start()
        return JobExit(7 << 8, 0.0)

    started = time.monotonic()
    exit_ = await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
    took = time.monotonic() - started
    stop.set()
    streams.close()  # the reading end closed: the writer's write fails, it returns
    thread.join(10)
    os.close(writer)
    assert exit_.code == 7
    assert shadow.calls[-2:] == ["fsync", "close"]
    assert len(shadow.data) > 0 and bytes(shadow.data) == bytes(written[:len(shadow.data)])
    assert took < 5, took
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()


def test_the_wait_for_the_shadows_reconnect_after_the_exit_does_not_count_in_the_drain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The job's last process writes 4 pieces (more than the pipe holds) and exits
    meanwhile; the connection is lost under the first write and the shadow reconnects
    after DRAIN_S: all 4 pieces reach it (the time without a connection moves the
    drain's end on), then fsync and close. DRAIN_S is what the connected part may take
    (a loaded runner's margin); the drain ends at the writer's end, not after it."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", 1.0)
    asyncio.run(_reconnect_after_the_exit(tmp_path))


async def _reconnect_after_the_exit(tmp_path: Path) -> None:
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    link = ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j", lease_s=600.0,
                      starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    lost = asyncio.Event()

    async def old_shadow() -> None:  # answers the open, then the connection drops
        dec = old.decoder(await old.recv(timeout_s=30))
        dec.get_int()
        await old.send(old.encoder().put_int(5).payload())
        await old.recv(timeout_s=30)
        await old.close()
        lost.set()

    shadow = NewShadow()
    peers = [asyncio.create_task(old_shadow()), asyncio.create_task(shadow.serve(new))]
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    session = sandbox / ".condor_ssh_to_job_1"  # a condor_ssh_to_job session's directory
    session.mkdir()
    link.shell = JobShell(sandbox, "someone", os.getuid(), os.getgid(), {}, [], None)
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    output = b"".join(b"line %d\n" % i for i in range(40000))[:4 * 65536]
    writer = os.open(fifo, os.O_WRONLY)

    def write_all() -> None:
        with contextlib.suppress(OSError):
            os.write(writer, output)  # blocks until the daemon has read it all
        os.close(writer)

    thread = threading.Thread(target=write_all, daemon=True)

    async def run() -> JobExit:
        streams.started()
        thread.start()
        return JobExit(0, 0.0)

    async def reconnect() -> None:
        await lost.wait()
        await asyncio.sleep(1.5)  # longer than DRAIN_S: what is under test
        request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
        await link.offer(fresh, request)  # type: ignore[arg-type]

    offering = asyncio.create_task(reconnect())
    exit_ = await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
    streams.close()
    thread.join(10)
    assert exit_.code == 0
    assert len(shadow.data) == len(output) and bytes(shadow.data) == output
    assert shadow.calls[-2:] == ["fsync", "close"]
    link.close()
    for task in (*peers, offering):
        task.cancel()
    await asyncio.gather(*peers, offering, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()


def test_what_ends_with_the_job_ends_before_its_output_is_drained(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A process left by the job holds the FIFO open after the job's exit: the stream
    drains on, but `exited` (condor_tail refused: ShadowLink.job_done; the job's ssh
    sessions ended, their directories removed) came at the exit, not once the drain
    is over."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", 30.0)
    asyncio.run(_exited_before_the_drain(tmp_path))


async def _exited_before_the_drain(tmp_path: Path) -> None:
    ours, theirs = await channel_pair()
    shadow = NewShadow()
    peer = asyncio.create_task(shadow.serve(theirs))
    link = ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j", lease_s=600.0,
                      starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    session = sandbox / ".condor_ssh_to_job_1"  # a condor_ssh_to_job session's directory
    session.mkdir()
    link.shell = JobShell(sandbox, "someone", os.getuid(), os.getgid(), {}, [], None)
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    left_behind = os.open(fifo, os.O_WRONLY)  # the job's child, still alive

    async def run() -> JobExit:
        streams.started()
        os.write(left_behind, b"last words\n")
        return JobExit(0, 0.0)

    running = asyncio.ensure_future(streams.alongside(run(), lambda: None, link.job_exited))
    async def first_piece() -> None:  # the job's output goes on streaming after its exit
        while not shadow.data:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(first_piece(), 10)
    assert link.job_done and not running.done()  # before: only once the drain was over
    assert link.shell.closing and not session.exists()  # no session outlives the job
    os.write(left_behind, b"more\n")
    os.close(left_behind)
    await asyncio.wait_for(running, 10)
    assert bytes(shadow.data) == b"last words\nmore\n"
    streams.close()
    link.close()
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()


def test_the_time_to_notice_a_shadow_that_stopped_answering_does_not_count_in_the_drain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The shadow's host stops answering (no answer, no close) under the stream's first
    write, while the job writes two pieces and exits: the call's timeout (timeout_s,
    300 s in production, as long as DRAIN_S) passes before the loss is noticed, then
    the shadow reconnects. Both pieces reach it: the time from the last answered call
    to the reconnect does not count in the drain."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", 1.0)  # the call's timeout: 2 s
    asyncio.run(_hung_shadow_after_the_exit(tmp_path))


async def _hung_shadow_after_the_exit(tmp_path: Path) -> None:
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    link = ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j", lease_s=600.0,
                      starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
    calls = ShadowFileCalls(ours, timeout_s=2.0)
    calls.attach(link)

    async def old_shadow() -> None:  # answers the open, then answers nothing, keeps it open
        dec = old.decoder(await old.recv(timeout_s=30))
        dec.get_int()
        await old.send(old.encoder().put_int(5).payload())
        await asyncio.Event().wait()

    shadow = NewShadow()
    peers = [asyncio.create_task(old_shadow()), asyncio.create_task(shadow.serve(new))]
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    session = sandbox / ".condor_ssh_to_job_1"  # a condor_ssh_to_job session's directory
    session.mkdir()
    link.shell = JobShell(sandbox, "someone", os.getuid(), os.getgid(), {}, [], None)
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    output = b"".join(b"line %d\n" % i for i in range(40000))[:2 * 65536]
    writer = os.open(fifo, os.O_WRONLY)

    def write_all() -> None:
        with contextlib.suppress(OSError):
            os.write(writer, output)
        os.close(writer)  # the job's last writer is gone: all it wrote is in the pipe

    thread = threading.Thread(target=write_all, daemon=True)

    async def run() -> JobExit:
        streams.started()
        thread.start()
        return JobExit(0, 0.0)

    async def reconnect() -> None:
        await link.disconnected.wait()
        request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
        await link.offer(fresh, request)  # type: ignore[arg-type]

    offering = asyncio.create_task(reconnect())
    await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
    streams.close()
    thread.join(10)
    assert len(shadow.data) == len(output)  # before: 65536 (the pipe's rest dropped)
    assert bytes(shadow.data) == output and shadow.calls[-2:] == ["fsync", "close"]
    link.close()
    for task in (*peers, offering):
        task.cancel()
    await asyncio.gather(*peers, offering, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()
