"""Streamed output (execd.wire.stream_output) against a shadow on a real socket pair: a
real process writes the FIFO; the shadow's side keeps the file the calls make.

The pool tier compares whole jobs with condor_startd (tests/pool/test_pool_stream_output.py);
here what the pool cannot provoke: a shadow that refuses a write (a full disk), and
the bound on what the daemon holds of a fast writer's output."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import CLOSE, LSEEK, OPEN, WRITE
from execd.wire.job_runner import JobExit, JobHeldError
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.stream_output import CHUNK, FSYNC
from execd.wire.streamed_output import StreamedOutput

JOB = {"Out": "out.txt", "StreamOut": True, "Err": "err.txt", "StreamErr": False}


class ShadowFile:
    """The shadow's side of the stream's calls: one file, its bytes by offset."""

    def __init__(self, refuse_write: int | None = None) -> None:
        self.data = bytearray()
        self.position = 0
        self.calls: list[str] = []
        self.largest_write = 0
        self.refuse_write = refuse_write  # an errno for every write

    async def serve(self, channel: Channel) -> None:
        names = {OPEN: "open", LSEEK: "lseek", WRITE: "write", FSYNC: "fsync", CLOSE: "close"}
        while True:
            dec = channel.decoder(await channel.recv(timeout_s=30))
            number = dec.get_int()
            self.calls.append(names[number])
            rval, failed = 0, 0
            if number == OPEN:
                dec.get_int(), dec.get_int(), dec.get_string()
                rval = 5
            elif number == LSEEK:
                _, offset, _ = dec.get_int(), dec.get_int(), dec.get_int()
                self.position = rval = offset
            elif number == WRITE:
                _, size = dec.get_int(), dec.get_int()
                data = dec.get_bytes(size)
                self.largest_write = max(self.largest_write, size)
                if self.refuse_write is not None:
                    rval, failed = -1, self.refuse_write
                else:
                    self.data[self.position:self.position + size] = data
                    self.position += size
                    rval = size
            else:
                dec.get_int()
            enc = channel.encoder().put_int(rval)
            if rval < 0:
                enc.put_int(failed)
            await channel.send(enc.payload())


def streamed(tmp_path: Path, shadow: ShadowFile, command: str,
             ) -> tuple[JobExit | BaseException, list[str]]:  # fmt: skip
    """`command` run with its stdout on the stream: its exit (or the error), the kills."""
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()

    async def scenario() -> tuple[JobExit | BaseException, list[str]]:
        ours, theirs = await channel_pair()
        peer = asyncio.create_task(shadow.serve(theirs))
        streams = StreamedOutput.for_job(ShadowFileCalls(ours), JOB, sandbox, "vm#1.0#1")
        killed: list[str] = []
        try:
            await streams.open(os.getuid(), os.getgid())
            fifo = streams.fifo("Out")
            assert fifo == f"{sandbox}.stdout" and streams.fifo("Err") is None
            with open(fifo, "wb") as out:
                job = subprocess.Popen(["/bin/sh", "-c", command], stdout=out)
            streams.started()

            async def run() -> JobExit:
                started = time.monotonic()
                status = await asyncio.to_thread(job.wait)
                return JobExit(status << 8, time.monotonic() - started)

            def kill() -> None:
                killed.append("job")
                job.kill()

            try:
                result: JobExit | BaseException = await streams.alongside(run(), kill)
            except JobHeldError as exc:
                result = exc
                job.wait()
            return result, killed
        finally:
            streams.close()
            assert not os.path.exists(f"{sandbox}.stdout")
            peer.cancel()
            await ours.close()
            await theirs.close()

    return asyncio.run(scenario())


def test_a_fast_writers_megabytes_reach_the_shadows_file_a_piece_at_a_time(
        tmp_path: Path) -> None:  # fmt: skip
    shadow = ShadowFile()
    done, killed = streamed(tmp_path, shadow, "seq 1 400000; exit 4")
    assert isinstance(done, JobExit) and done.code == 4 and killed == []
    assert bytes(shadow.data) == "".join(f"{i}\n" for i in range(1, 400_001)).encode()
    # opened once, each piece sought then written, then fsync and close
    assert shadow.calls[0] == "open" and shadow.calls[-2:] == ["fsync", "close"]
    assert set(shadow.calls[1:-2]) == {"lseek", "write"}
    assert 0 < shadow.largest_write <= CHUNK


@pytest.mark.parametrize("command", ["echo hello; sleep 30", "echo hello"])
def test_a_write_the_shadow_refuses_holds_the_job_and_kills_it(
        tmp_path: Path, command: str) -> None:  # fmt: skip
    shadow = ShadowFile(refuse_write=errno.ENOSPC)
    started = time.monotonic()
    done, killed = streamed(tmp_path, shadow, command)
    assert isinstance(done, JobHeldError)
    assert (done.code, done.subcode) == (9, errno.ENOSPC)
    assert str(done) == ("StreamHandler: stdout: write of 6 bytes to out.txt failed: "
                         "No space left on device")  # fmt: skip
    if "sleep" in command:
        assert killed == ["job"] and time.monotonic() - started < 20


def test_a_writer_faster_than_the_shadow_blocks_and_the_daemon_holds_one_piece(
        tmp_path: Path) -> None:  # fmt: skip
    """The shadow never answers the first write; the job writes 10 MB: it blocks in its
    write() once the pipe is full, and the daemon has read no more than the one piece it
    is sending (the rest stays in the job, not in the daemon's memory)."""
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()

    async def scenario() -> None:
        ours, theirs = await channel_pair()
        writing = asyncio.Event()

        async def shadow() -> None:  # answers the open and the seek; the write never
            while True:
                dec = theirs.decoder(await theirs.recv(timeout_s=30))
                if dec.get_int() == WRITE:
                    writing.set()
                    continue
                await theirs.send(theirs.encoder().put_int(5).payload())

        peer = asyncio.create_task(shadow())
        streams = StreamedOutput.for_job(ShadowFileCalls(ours), JOB, sandbox, "vm#1.0#1")
        await streams.open(os.getuid(), os.getgid())
        fifo = streams.fifo("Out")
        assert fifo is not None
        with open(fifo, "wb") as out:
            job = subprocess.Popen(["head", "-c", "10000000", "/dev/zero"], stdout=out)
        streams.started()
        copy = asyncio.create_task(streams.streams["Out"].run())
        try:
            await asyncio.wait_for(writing.wait(), 10)
            stream = streams.streams["Out"]
            read_fd = stream.read_fd
            pipe_size = fcntl.fcntl(read_fd, F_GETPIPE_SZ)
            # the kernel's pipe fills; no event says so: its level is looked at
            deadline = time.monotonic() + 10
            while _buffered(read_fd) < pipe_size and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert _buffered(read_fd) == pipe_size
            assert job.poll() is None  # blocked in its write(), not done
            # all the daemon took from the job is the one piece it is sending
            assert 0 < len(stream.pending) <= CHUNK and stream.offset == 0
        finally:
            job.kill()
            job.wait()
            copy.cancel()
            await asyncio.gather(copy, return_exceptions=True)
            streams.close()
            peer.cancel()
            await asyncio.gather(peer, return_exceptions=True)
            await ours.close()
            await theirs.close()

    asyncio.run(scenario())


F_GETPIPE_SZ = 1032  # linux/fcntl.h (fcntl.F_GETPIPE_SZ from Python 3.10 on some builds)


def _buffered(fd: int) -> int:
    """The bytes waiting in the pipe (FIONREAD)."""
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
