"""Streamed output (execd.wire.stream_output) where the connection changes or a call is
cancelled under a stream: shadows on real socket pairs, each answer numbered so that a
call reading another's answer shows."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from wire_pairs import channel_pair

from execd.wire.chirp_files import LSEEK, OPEN, WRITE
from execd.wire.job_runner import JobExit, JobHeldError
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.stream_output import OutputStream, StreamedOutput

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
