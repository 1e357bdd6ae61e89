"""Streamed output: a job's stdout/stderr written to the shadow's files while it runs.

With `stream_output = true` (StreamOut) or `stream_error = true` (StreamErr) in the job
ad, condor_starter gives the job a pipe instead of a sandbox file and writes what comes
out of it into the job ad's Out/Err on the submit side with the shadow's remote system
calls (condor_starter.V6.1/stream_handler.cpp): CONDOR_open of the ad's path as it is
(the shadow resolves a relative one in the job's Iwd), O_CREAT|O_TRUNC|O_WRONLY, mode
0666, before the job starts (where that fails the job is held, code 9
UnableToOpenOutputStream: "unable to establish standard output stream"); then, for each
piece read from the pipe, CONDOR_lseek to the offset written so far and CONDOR_write;
at the end of the stream CONDOR_fsync and CONDOR_close. A write or seek the shadow
refuses holds the job (code 9, condor_starter's vacate reason). After a lost connection
it waits for the shadow's reconnect, opens the file again without O_TRUNC, checks that
it still holds what was written (its size is not below the offset) and writes the
piece it had again at its offset (StreamHandler::Reconnect).

A restart in place (`execd restart`) hands each stream to the next image (`export`,
`StreamedOutput.adopted` in execd/wire/streamed_output.py): the FIFO's reading end
survives the exec (so the job never writes to a pipe without a reader), with the
shadow's descriptor, the offset and the piece not yet written; the next image writes
that piece again at its offset, having opened the file again (not truncated, its size
checked) on the connection handed over, else after the shadow's reconnect: the old
image's descriptor may be of a shadow a reconnect replaced while the stream was quiet.

Here the pipe is a FIFO next to the sandbox (`<sandbox>.stdout`, `.stderr`: not in the
sandbox, where the job would see it), owned by the job's user, which the starter opens
as the job's stdout. The daemon reads it: one piece of at most CHUNK bytes at a time,
the next only once the shadow has answered the last write, so a job that writes faster
than the shadow stores blocks in its write() (the kernel's pipe buffer) and the daemon
holds one piece per stream. Until the job has started, the daemon holds a write end of
its own, so that the FIFO's end of stream means the job's last writer has closed it.
condor_starter's pieces are 4096 bytes (STREAM_BUFFER_SIZE); these are 64 KiB: the
file's bytes are the same, with fewer round trips to the shadow.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno as errnos
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from execd.log import get_logger
from execd.wire.chirp_files import CLOSE, LSEEK, O_CREAT, O_TRUNC, O_WRONLY, OPEN, WRITE
from execd.wire.handover import inherited_fd
from execd.wire.job_runner import JobHeldError
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_syscalls import ShadowConnectionLostError, SyscallError

__all__ = ["CHUNK", "OutputStream", "release_streams"]
log = get_logger("wire")

FSYNC = 26
CHUNK = 65536
SEEK_SET, SEEK_END = 0, 2
REOPEN = -1  # a stream's connection that is no connection: it opens its file again first
MODE = 0o666
# CONDOR_HOLD_CODE::UnableToOpenOutputStream
HOLD_UNABLE_TO_OPEN_OUTPUT_STREAM = 9
class OutputStream:
    """One streamed std file: the FIFO the job writes, the shadow's file it goes to."""

    def __init__(self, calls: ShadowFileCalls, path: str, name: str, fifo: Path,
                 gjid: str) -> None:  # fmt: skip
        self.calls, self.path, self.name, self.fifo, self.gjid = calls, path, name, fifo, gjid
        self.remote_fd = -1
        self.offset = 0
        self.pending = b""  # the piece read from the job, not yet written
        self.read_fd = -1
        self.hold_fd = -1  # the daemon's own write end, until the job has started
        self.connection = self._connection()  # the connection remote_fd was opened on
        self.flags = O_CREAT | O_TRUNC | O_WRONLY  # the open's: see streamed_output.open_flags
        # Once the job has exited (see drain): the loop's time its writers' end of stream
        # is awaited until, and when the drain began (time without a connection after
        # that moves the deadline on).
        self.drain_until: float | None = None
        self._drain_began = 0.0
        self._waiting: asyncio.Timeout | None = None  # a read waiting for the job

    def make_fifo(self, uid: int, gid: int) -> None:
        """The FIFO, the job's user's, opened for reading (and a write end held).

        Opened before it is given to the user (O_NOFOLLOW, checked to be the FIFO just
        made), its owner changed through the descriptor and the write end opened through
        it: in an EXECUTE of mode 1777 the user may rename the path and plant a symlink
        there once it is theirs, which a root open by path would follow."""
        with contextlib.suppress(FileNotFoundError):
            self.fifo.unlink()
        os.mkfifo(self.fifo, 0o600)
        made = os.lstat(self.fifo)
        fd = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        info = os.fstat(fd)
        if not stat.S_ISFIFO(info.st_mode) or info.st_uid != os.geteuid() or \
                (info.st_dev, info.st_ino) != (made.st_dev, made.st_ino):  # fmt: skip
            os.close(fd)
            raise OSError(errnos.EEXIST, f"{self.fifo} was replaced before it was opened")
        self.read_fd = fd
        os.fchown(fd, uid, gid)
        self.hold_fd = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)

    def release_hold(self) -> None:
        if self.hold_fd >= 0:
            os.close(self.hold_fd)
            self.hold_fd = -1

    def export(self) -> dict[str, Any] | None:
        """What the next image needs to go on (its reading end made inheritable)."""
        if self.read_fd < 0:
            return None
        os.set_inheritable(self.read_fd, True)
        return {"pid": os.getpid(), "fd": self.read_fd, "inode": os.fstat(self.read_fd).st_ino,
                "path": self.path, "name": self.name, "fifo": str(self.fifo),
                "remote_fd": self.remote_fd, "offset": self.offset, "flags": self.flags,
                "pending": base64.b64encode(self.pending).decode()}  # fmt: skip

    @classmethod
    def adopted(cls, calls: ShadowFileCalls, record: dict[str, Any], gjid: str,
                ) -> OutputStream | None:  # fmt: skip
        """The stream the old image exported, if this process inherited its FIFO through
        its own exec (pid and inode as recorded); else None. A record that does not
        parse: logged, its descriptor closed, None."""
        fd = inherited_fifo(record)
        if fd is None:
            return None
        try:
            stream = cls(calls, str(record["path"]), str(record["name"]),
                         Path(str(record["fifo"])), gjid)  # fmt: skip
            stream.remote_fd, stream.offset = int(record["remote_fd"]), int(record["offset"])
            # The shadow's descriptor is never used again: a reconnect the old image took
            # while the stream was quiet (or one this image takes) may have made it the
            # old shadow's. The file is opened again (flags less O_TRUNC, size checked)
            # before the first write, as after a reconnect.
            stream.connection = REOPEN
            stream.flags = int(record.get("flags", O_CREAT | O_WRONLY))
            stream.pending = base64.b64decode(str(record["pending"]), validate=True)
        except (KeyError, ValueError, TypeError) as exc:
            log.error("stream_not_adopted", job=gjid, error=str(exc))
            os.close(fd)
            return None
        os.set_inheritable(fd, False)
        stream.read_fd = fd
        return stream

    def close(self, handed_over: bool = False) -> None:
        """The FIFO closed and removed; kept for the next image when `handed_over`."""
        self.release_hold()
        if handed_over and self.read_fd >= 0:
            return
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1
        with contextlib.suppress(OSError):
            self.fifo.unlink()

    def _held(self, what: str, exc: SyscallError | None = None,
              prefix: str = "StreamHandler:") -> JobHeldError:  # fmt: skip
        errno = exc.errno if exc is not None else 0
        detail = f": {os.strerror(errno)}" if errno else ""
        return JobHeldError(f"{prefix} {self.name}: {what}{detail}",
                            HOLD_UNABLE_TO_OPEN_OUTPUT_STREAM, errno)  # fmt: skip

    def _connection(self) -> int:
        link = self.calls.link
        return link.connections if link is not None else 0

    def _stale(self) -> bool:
        """Whether the shadow's descriptor is of a connection a reconnect replaced (the
        reconnect may have been taken by another call: condor_starter's ReconnectAll
        re-opens every stream whatever call noticed)."""
        link = self.calls.link
        return link is not None and (link.connections != self.connection or link.offered)

    async def open(self, phrase: str) -> None:
        """Opens the shadow's file with `flags` (an appending stream: then sought to its
        end, the offset starting there); JobHeldError where it cannot."""
        try:
            self.remote_fd = await self.calls.file_call(OPEN, "open", self.flags, MODE,
                                                        self.path)  # fmt: skip
            self.connection = self._connection()
            if not self.flags & O_TRUNC:
                self.offset = await self._call(LSEEK, "lseek", self.remote_fd, 0, SEEK_END)
        except SyscallError as exc:
            log.warning("stream_open_failed", job=self.gjid, stream=self.name,
                        errno=exc.errno)  # fmt: skip
            raise JobHeldError(f"unable to establish {phrase} stream",
                               HOLD_UNABLE_TO_OPEN_OUTPUT_STREAM, 0) from None
        log.info("stream_opened", job=self.gjid, stream=self.name, path=self.path)

    async def run(self) -> None:
        """Copies the FIFO to the shadow's file until the job's end of stream, then
        fsync and close there."""
        while True:
            if not self.pending:
                data = await self._read()
                if not data:
                    break
                self.pending = data
            await self._sent(self._write_pending)
        await self._sent(self._finish)

    def drain(self, budget_s: float) -> None:
        """The job has exited: from now on the stream ends `budget_s` later (time
        without a connection to the shadow, waiting for its reconnect, does not count),
        whether its writers have closed it or not: a process that outlived the job and
        writes without end (run without a cgroup, which would have killed it) is cut
        off there, its output ending with what was read until then."""
        loop = asyncio.get_running_loop()
        self._drain_began = loop.time()
        self.drain_until = self._drain_began + budget_s
        if self._waiting is not None:
            self._waiting.reschedule(self.drain_until)

    def _drain_deadline(self) -> float | None:
        if self.drain_until is None:
            return None
        link = self.calls.link
        down_s = link.down_s(since=self._drain_began) if link is not None else 0.0
        return self.drain_until + down_s

    async def _read(self) -> bytes:
        """The job's next piece; b"" at its end of stream or once the drain is over."""
        loop = asyncio.get_running_loop()
        while True:
            deadline = self._drain_deadline()
            if deadline is not None and loop.time() >= deadline:
                log.warning("stream_not_drained", job=self.gjid, stream=self.name,
                            bytes=self.offset)  # fmt: skip
                return b""
            try:
                return os.read(self.read_fd, CHUNK)
            except BlockingIOError:
                pass
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self.read_fd, _set_once, ready)
            try:  # a timeout is checked again at the top (a reconnect moves it on)
                async with asyncio.timeout_at(deadline) as self._waiting:
                    await ready
            except TimeoutError:
                pass
            finally:
                self._waiting = None
                loop.remove_reader(self.read_fd)

    async def _write_pending(self) -> None:
        try:
            await self._call(LSEEK, "lseek", self.remote_fd, self.offset, SEEK_SET)
        except SyscallError as exc:
            raise self._held(f"couldn't lseek on {self.path} to {self.offset}", exc) from None
        size = len(self.pending)
        try:
            written = await self._call(WRITE, "write", self.remote_fd, size, self.pending)
        except SyscallError as exc:
            raise self._held(f"write of {size} bytes to {self.path} failed", exc) from None
        if written != size:
            raise self._held(f"short write to {self.path}: only {written} of {size} "
                             f"bytes written")  # fmt: skip
        self.offset += written
        self.pending = b""

    async def _finish(self) -> None:
        try:
            await self._call(FSYNC, "fsync", self.remote_fd)
        except SyscallError as exc:
            # condor_starter's text has the double colon
            raise self._held(f"couldn't fsync {self.path}", exc, prefix="StreamHandler::") \
                from None  # fmt: skip
        # A close that fails is no matter (condor_starter's neither): the bytes are stored.
        with contextlib.suppress(ShadowConnectionLostError, SyscallError):
            await self._call(CLOSE, "close", self.remote_fd)
        log.info("stream_closed", job=self.gjid, stream=self.name, bytes=self.offset)

    async def _call(self, number: int, name: str, *args: str | int | bytes,
                    connection: int | None = None) -> int:  # fmt: skip
        """A call on the shadow's descriptor, not sent where a reconnect replaced the
        connection it was opened on (StaleDescriptorError), and shielded: a cancel (the
        job held, the drain over) lands once its answer is read, never between the call
        and its answer, which the next call would read as its own."""
        on = self.connection if connection is None else connection
        call = self.calls.owned(self.calls.file_call(number, name, *args, connection=on))
        return await asyncio.shield(call)

    async def _sent(self, step: Callable[[], Awaitable[None]]) -> None:
        """A step, made again after each reconnect (re-opened, checked) until it is done;
        a refusal on a descriptor a reconnect replaced meanwhile is not the file's."""
        while True:
            try:
                if self._stale():
                    await self._reconnect(None)
                await step()
                return
            except ShadowConnectionLostError as exc:
                await self._reconnect(exc)
            except JobHeldError:
                if not self._stale():
                    raise

    async def _reconnect(self, lost: ShadowConnectionLostError | None) -> None:
        """Waits for the shadow's reconnect if the connection is lost (ProtocolError
        where none comes within the lease), opens the file again (not truncated) and
        checks its size."""
        link = self.calls.link
        if link is None:
            if lost is not None:
                raise lost
            return
        while True:
            if link.disconnected.is_set():
                await link.wait_for_reconnect(lost or ShadowConnectionLostError("lost"))
            log.info("stream_reconnecting", job=self.gjid, stream=self.name, offset=self.offset)
            # Both calls on the connection current now: where a reconnect replaces it
            # between them, the seek is not sent (the descriptor is the old shadow's).
            on = self._connection()
            try:
                step = "open"
                # never truncated again (condor_starter: its flags minus O_TRUNC)
                self.remote_fd = await self._call(OPEN, "open", self.flags & ~O_TRUNC, MODE,
                                                  self.path, connection=on)  # fmt: skip
                step = "lseek"
                size = await self._call(LSEEK, "lseek", self.remote_fd, 0, SEEK_END,
                                        connection=on)  # fmt: skip
                self.connection = on
            except ShadowConnectionLostError as again:
                lost = again
                continue
            except SyscallError as exc:
                if self._stale():  # a reconnect came between the open and the seek
                    continue
                raise self._reopen_failed(step, exc) from None
            if size < self.offset:
                raise JobHeldError(f"StreamHandler: output file {self.path} is length {size}, "
                                   f"expected at least {self.offset}",
                                   HOLD_UNABLE_TO_OPEN_OUTPUT_STREAM, 0)  # fmt: skip
            return

    def _reopen_failed(self, step: str, exc: SyscallError) -> JobHeldError:
        """condor_starter's words for a reopen (StreamHandler::Reconnect) or its size
        check's seek (VerifyOutputFile) the shadow refused."""
        if step == "open":
            text = f"Couldn't reopen {self.path} to stream {self.name}: {os.strerror(exc.errno)}"
        else:
            text = f"StreamHandler: cannot lseek to output file {self.path} on reconnect: " \
                f"{exc.errno}"  # fmt: skip
        return JobHeldError(text, HOLD_UNABLE_TO_OPEN_OUTPUT_STREAM, exc.errno)


def _set_once(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def inherited_fifo(record: dict[str, Any]) -> int | None:
    """The record's FIFO descriptor if this process inherited it through its own exec."""
    return inherited_fd(record, stat.S_ISFIFO)


def release_streams(records: dict[str, Any] | None) -> None:
    """Inherited streams nobody goes on with: their FIFOs closed and removed."""
    for record in (records or {}).values():
        if isinstance(record, dict) and (fd := inherited_fifo(record)) is not None:
            os.close(fd)
            with contextlib.suppress(OSError, TypeError):
                os.unlink(record["fifo"])
