"""Streamed output (execd.wire.stream_output) where the connection changes or a call is
cancelled under a stream: shadows on real socket pairs, each answer numbered so that a
call reading another's answer shows."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from wire_pairs import channel_pair

from execd.wire import streamed_output
from execd.wire.channel import Channel
from execd.wire.chirp_files import CLOSE, LSEEK, O_CREAT, O_TRUNC, O_WRONLY, OPEN, WRITE
from execd.wire.job_runner import JobExit, JobHeldError
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.stream_output import CHUNK, FSYNC, OutputStream, inherited_fifo, release_streams
from execd.wire.streamed_output import StreamedOutput

NAMES = {OPEN: "open", LSEEK: "lseek", WRITE: "write"}
SEC_SESSION_INFO = 288
REGISTER_JOB_INFO = -81


def test_a_write_on_the_old_shadows_descriptor_never_reaches_the_new_shadow() -> None:
    asyncio.run(_old_descriptor_after_a_reconnect())


async def _old_descriptor_after_a_reconnect() -> None:
    """The stream's lseek is answered on the old connection; its write waits behind an
    update holding the lock; a reconnect comes. The write must not go out with the old
    shadow's descriptor (5) on the new connection: the file is opened there again."""
    ours, old = await channel_pair()
    fresh, new = await channel_pair()
    link = ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j", lease_s=600.0,
                      starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    stream = OutputStream(calls, "out.txt", "stdout", Path("/nonexistent"), "j")
    stream.remote_fd, stream.pending = 5, b"job bytes\n"
    seeked = asyncio.Event()
    seen: list[tuple[object, ...]] = []

    async def old_shadow() -> None:  # answers the lseek, then nothing (a partition)
        while True:
            dec = old.decoder(await old.recv(timeout_s=30))
            if dec.get_int() == LSEEK:
                seeked.set()
                await old.send(old.encoder().put_int(0).payload())

    async def new_shadow() -> None:
        while True:
            dec = new.decoder(await new.recv(timeout_s=30))
            number = dec.get_int()
            args: tuple[object, ...] = ()
            rval = 7 if number == OPEN else 0
            if number == WRITE:
                args, rval = (dec.get_int(),), dec.get_int()
            seen.append((NAMES.get(number, number), *args))
            enc = new.encoder().put_int(rval)
            if number == SEC_SESSION_INFO:
                for _ in range(6):
                    enc.put_string("x")
            await new.send(enc.payload())

    peers = [asyncio.create_task(old_shadow()), asyncio.create_task(new_shadow())]
    lock_taken = asyncio.Event()
    real_once = calls._once

    async def once(build, answer):  # type: ignore[no-untyped-def]
        if seeked.is_set():
            lock_taken.set()  # the update is the call holding the lock now
        return await real_once(build, answer)

    calls._once = once  # type: ignore[method-assign]
    writing = asyncio.create_task(stream._sent(stream._write_pending))
    await seeked.wait()
    update = asyncio.create_task(calls.register_job_info({}))
    await lock_taken.wait()
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
    await asyncio.wait_for(writing, 10)
    assert ("write", 5) not in seen
    assert [s for s in seen if s[0] in ("open", "lseek", "write")] == \
        [("open",), ("lseek",), ("lseek",), ("write", 7)]  # fmt: skip
    assert stream.offset == len(b"job bytes\n")
    for task in (*peers, update, offered):
        task.cancel()
    await asyncio.gather(*peers, update, offered, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()


def test_a_hold_while_a_stream_write_waits_leaves_calls_and_answers_in_step(
        tmp_path: Path) -> None:  # fmt: skip
    asyncio.run(_hold_while_a_write_waits(tmp_path))


async def _hold_while_a_write_waits(tmp_path: Path) -> None:
    """The job is held while the shadow has not yet answered a stream's write: the next
    call (report_hold's) reads its own answer, not the write's."""
    ours, theirs = await channel_pair()
    wrote = asyncio.Event()

    async def shadow() -> None:
        count = 0
        while True:
            dec = theirs.decoder(await theirs.recv(timeout_s=30))
            number = dec.get_int()
            count += 1
            if number == WRITE:
                wrote.set()
                await asyncio.sleep(0.3)  # a slow shadow: the hold comes meanwhile
            await theirs.send(theirs.encoder().put_int(1000 + count).payload())

    peer = asyncio.create_task(shadow())
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    calls = ShadowFileCalls(ours)
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    writer = os.open(fifo, os.O_WRONLY)
    os.write(writer, b"hello\n")
    streams.started()

    async def run() -> JobExit:
        await wrote.wait()
        raise JobHeldError("policy hold", 21, 0)

    with contextlib.suppress(JobHeldError):
        await streams.alongside(run(), lambda: None)
    # open 1001, lseek 1002, write 1003: the next call is the fourth
    assert await calls.file_call(LSEEK, "lseek", 5, 0, 0) == 1004
    os.close(writer)
    streams.close()
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()




def test_a_fifo_swapped_for_a_symlink_once_it_is_the_users_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """In an EXECUTE of mode 1777 the job's user owns the FIFO once it is given to them
    and may replace it with a symlink before the daemon opens it: the daemon's ends must
    still be the FIFO it made (never the symlink's target)."""
    execute = tmp_path / "execute"
    execute.mkdir()
    execute.chmod(0o1777)
    secret = tmp_path / "shadow-file"
    secret.write_bytes(b"root:secret\n")
    fifo = execute / "dir_1.stdout"

    def swapped(real: Callable[..., None]) -> Callable[..., None]:
        def change_owner(target: object, uid: int, gid: int) -> None:
            real(target, uid, gid)
            fifo.rename(execute / "moved")  # what the user may do now
            fifo.symlink_to(secret)
        return change_owner

    monkeypatch.setattr(os, "chown", swapped(os.chown))
    monkeypatch.setattr(os, "fchown", swapped(os.fchown))
    stream = OutputStream(ShadowFileCalls(None), "out.txt", "stdout", fifo, "j")  # type: ignore[arg-type]
    stream.make_fifo(os.getuid(), os.getgid())
    try:
        assert stat.S_ISFIFO(os.fstat(stream.read_fd).st_mode)
        assert stat.S_ISFIFO(os.fstat(stream.hold_fd).st_mode)
        os.write(stream.hold_fd, b"from the job\n")
        assert os.read(stream.read_fd, 100) == b"from the job\n"
        assert secret.read_bytes() == b"root:secret\n"
    finally:
        stream.close()


class NewShadow:
    """A reconnected shadow's side of the stream's calls: one file, by offset."""

    def __init__(self, data: bytes = b"", refuse_open: int | None = None) -> None:
        self.data = bytearray(data)
        self.calls: list[str] = []
        self.opens: list[int] = []  # the flags of each open
        self.refuse_open = refuse_open  # an errno for every open

    async def serve(self, channel: Channel) -> None:
        names = {OPEN: "open", LSEEK: "lseek", WRITE: "write", FSYNC: "fsync", CLOSE: "close"}
        position = 0
        while True:
            dec = channel.decoder(await channel.recv(timeout_s=30))
            number = dec.get_int()
            self.calls.append(names.get(number, str(number)))
            rval, failed = 0, 0
            if number == OPEN:
                flags, _, _ = dec.get_int(), dec.get_int(), dec.get_string()
                self.opens.append(flags)
                if flags & O_TRUNC:
                    del self.data[:]
                rval = 7
                if self.refuse_open is not None:
                    rval, failed = -1, self.refuse_open
            elif number == LSEEK:
                _, offset, whence = dec.get_int(), dec.get_int(), dec.get_int()
                position = rval = len(self.data) if whence == 2 else offset
            elif number == WRITE:
                _, size = dec.get_int(), dec.get_int()
                self.data[position:position + size] = dec.get_bytes(size)
                rval = size
                position += size
            enc = channel.encoder().put_int(rval)
            if rval < 0:
                enc.put_int(failed)
            if number == SEC_SESSION_INFO:
                for _ in range(6):
                    enc.put_string("x")
            await channel.send(enc.payload())


def test_output_sent_after_a_reconnect_that_outlasts_the_drain_is_sent_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The job has written and exited; the shadow's connection is lost under the first
    write and its reconnect comes after DRAIN_S: the output still reaches the new
    shadow whole, fsync and close after it (the drain bounds only the wait for the
    job's writers)."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", 0.05)
    asyncio.run(_reconnect_during_the_drain(tmp_path))


async def _reconnect_during_the_drain(tmp_path: Path) -> None:
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
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    fifo = streams.fifo("Out")
    assert fifo is not None
    output = b"".join(b"line %d\n" % i for i in range(20000))

    async def run() -> JobExit:
        writer = os.open(fifo, os.O_WRONLY)
        streams.started()
        os.write(writer, output[:CHUNK])
        os.close(writer)
        return JobExit(0, 0.0)

    async def reconnect() -> None:
        await lost.wait()
        await asyncio.sleep(0.3)  # longer than DRAIN_S: what is under test
        request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
        await link.offer(fresh, request)  # type: ignore[arg-type]

    offering = asyncio.create_task(reconnect())
    exit_ = await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
    assert exit_.code == 0
    assert bytes(shadow.data) == output[:CHUNK]
    assert shadow.calls[-2:] == ["fsync", "close"]
    streams.close()
    link.close()
    for task in (*peers, offering):
        task.cancel()
    await asyncio.gather(*peers, offering, return_exceptions=True)
    for channel in (ours, old, fresh, new):
        await channel.close()


def test_a_writer_that_outlives_the_job_ends_the_stream_after_the_drain(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A process still holding the FIFO open after the job exited: what it wrote is
    sent, and after DRAIN_S the stream ends (fsync, close) and the job's exit stands."""
    monkeypatch.setattr(streamed_output, "DRAIN_S", 0.2)
    asyncio.run(_lingering_writer(tmp_path))


async def _lingering_writer(tmp_path: Path) -> None:
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
    lingering = os.open(fifo, os.O_WRONLY)

    async def run() -> JobExit:
        streams.started()
        os.write(lingering, b"before the exit\n")
        return JobExit(3 << 8, 0.0)

    exit_ = await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
    assert exit_.code == 3
    assert bytes(shadow.data) == b"before the exit\n"
    assert shadow.calls[-2:] == ["fsync", "close"]
    os.close(lingering)
    streams.close()
    peer.cancel()
    await asyncio.gather(peer, return_exceptions=True)
    await ours.close()
    await theirs.close()


def _stream_into(tmp_path: Path, shadow: NewShadow, job: dict[str, object],
                 output: bytes) -> None:  # fmt: skip
    async def scenario() -> None:
        ours, theirs = await channel_pair()
        peer = asyncio.create_task(shadow.serve(theirs))
        sandbox = tmp_path / "dir_1"
        sandbox.mkdir()
        streams = StreamedOutput.for_job(ShadowFileCalls(ours), job, sandbox, "j")
        await streams.open(os.getuid(), os.getgid())
        fifo = streams.fifo("Out")
        assert fifo is not None

        async def run() -> JobExit:
            writer = os.open(fifo, os.O_WRONLY)
            streams.started()
            os.write(writer, output)
            os.close(writer)
            return JobExit(0, 0.0)

        await asyncio.wait_for(streams.alongside(run(), lambda: None), 10)
        streams.close()
        peer.cancel()
        await asyncio.gather(peer, return_exceptions=True)
        await ours.close()
        await theirs.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("attrs", "kept"), [
    ({}, False),
    ({"EraseOutputAndErrorOnRestart": True}, False),
    ({"EraseOutputAndErrorOnRestart": False}, True),
    ({"WantCheckpointSignal": True}, True),
    ({"WantFTOnCheckpoint": True}, True),
    ({"WantCheckpointSignal": 1}, True),  # LookupBool takes numbers too
    ({"WantFTOnCheckpoint": 0.5}, True),
    ({"EraseOutputAndErrorOnRestart": 0}, True),
    ({"EraseOutputAndErrorOnRestart": 1, "WantCheckpointSignal": 0}, False),
    ({"WantCheckpointSignal": "yes"}, False),  # a string is not a boolean there
])  # fmt: skip
def test_the_streamed_file_is_appended_to_where_condor_starter_appends(
        tmp_path: Path, attrs: dict[str, object], kept: bool) -> None:  # fmt: skip
    """condor_starter's VanillaProc::streamingOpenFlags: O_APPEND (turned into a seek to
    the end) where the job checkpoints or keeps its output on a restart; else O_TRUNC.
    A rerun job's earlier output stays in the first case."""
    shadow = NewShadow(b"earlier run\n")
    _stream_into(tmp_path, shadow, {"Out": "out.txt", "StreamOut": True, **attrs}, b"this run\n")
    assert shadow.opens == [O_CREAT | O_WRONLY if kept else O_CREAT | O_TRUNC | O_WRONLY]
    assert bytes(shadow.data) == (b"earlier run\n" if kept else b"") + b"this run\n"


def _reconnected(shadow: NewShadow, offset: int) -> JobHeldError | None:
    """A stream that wrote `offset` bytes opened again on `shadow`'s connection."""
    async def scenario() -> JobHeldError | None:
        ours, theirs = await channel_pair()
        peer = asyncio.create_task(shadow.serve(theirs))
        calls = ShadowFileCalls(ours)
        calls.attach(ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                                lease_s=600.0, starter_ad={},
                                starter_address="<1.2.3.4:5>"))  # fmt: skip
        stream = OutputStream(calls, "out.txt", "stdout", Path("/nonexistent"), "j")
        stream.offset = offset
        try:
            await stream._reconnect(None)
            return None
        except JobHeldError as exc:
            return exc
        finally:
            peer.cancel()
            await asyncio.gather(peer, return_exceptions=True)
            await ours.close()
            await theirs.close()

    return asyncio.run(scenario())


def test_a_reconnect_reopens_with_the_flags_less_o_trunc_and_condor_starters_hold_texts(
        ) -> None:  # fmt: skip
    shadow = NewShadow(b"0123456789")
    assert _reconnected(shadow, 10) is None
    assert shadow.opens == [O_CREAT | O_WRONLY]  # created again if it went missing
    short = _reconnected(NewShadow(b"0123"), 10)
    assert short is not None and (str(short), short.code, short.subcode) == (
        "StreamHandler: output file out.txt is length 4, expected at least 10", 9, 0)
    refused = _reconnected(NewShadow(refuse_open=errno.EACCES), 10)
    assert refused is not None and (str(refused), refused.code, refused.subcode) == (
        "Couldn't reopen out.txt to stream stdout: Permission denied", 9, errno.EACCES)


def test_inherited_streams_nobody_goes_on_with_are_closed_and_removed(tmp_path: Path) -> None:
    """release_streams (the next image's conversation could not resume): the FIFO the
    old image handed over is closed and no longer next to the sandbox."""
    fifo = tmp_path / "dir_1.stdout"
    stream = OutputStream(ShadowFileCalls(None), "out.txt", "stdout", fifo, "j")  # type: ignore[arg-type]
    stream.make_fifo(os.getuid(), os.getgid())
    stream.release_hold()
    record = stream.export()
    assert record is not None
    release_streams({"Out": record})
    assert not fifo.exists()
    assert inherited_fifo(record) is None  # the descriptor is closed

