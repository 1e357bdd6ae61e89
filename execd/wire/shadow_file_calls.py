"""The shadow's file calls: Chirp's remote I/O on the submit side's files.

A job that wants the I/O proxy (WantIOProxy) reads and writes files where its shadow
is, through the Chirp proxy (execd/wire/chirp_files.py), which passes each request on
as one of these remote system calls on the activation socket: open, read, write, stat,
getfile, putfile and the rest, with HTCondor's numbers and message shapes
(condor_includes/condor_sys.h; condor_shadow.V6.1/NTreceivers.cpp answers them). The
paths are the shadow's, and the shadow decides what the job may touch (its own access
checks). ShadowFileCalls is ShadowSyscalls (shadow_syscalls.py: one call at a time,
each waiting for its answer, made again after a reconnect where that is safe) with
these calls added; the conversation makes one where it opens the Chirp proxy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from execd.wire.encoding import Decoder, Encoder
from execd.wire.shadow_syscalls import (
    ShadowConnectionLostError,
    ShadowSyscalls,
    SyscallError,
    checked_rval,
)

GET_FILE_INFO_NEW = -74
READLINK = 72
FSTAT = 24
STAT = 108
GETFILE = 293
PUTFILE = 294
STAT_LINE_BYTES = 1024  # CONDOR_stat's answer: the stat line in a 1024-byte buffer


class ShadowFileCalls(ShadowSyscalls):
    """The shadow's syscalls with its file calls (what the Chirp proxy passes on)."""

    async def file_call(self, number: int, name: str, *args: str | int | bytes,
                        connection: int | None = None) -> int:  # fmt: skip
        """A file call that answers an rval only (unlink, chmod, open, write, ...): its
        arguments (strings, integers, raw bytes) in the order NTsenders sends them.
        `connection`: the link's connection count a descriptor argument was opened on;
        where a reconnect replaced it the call is not sent (StaleDescriptorError)."""
        dec = await self._exchange(_arguments(number, args), replay=False,
                                   connection=connection)  # fmt: skip
        assert dec is not None
        return _answer(dec, name)

    async def file_info(self, number: int, name: str, what: str | int) -> bytes:
        """stat, lstat, statfs (of a path) or fstat (of a descriptor): the shadow's line
        of numbers (its 1024-byte buffer up to the first NUL). fstat is not sent again
        after a reconnect: a new shadow's descriptor of that number is another file."""
        dec = await self._exchange(_arguments(number, (what,)), replay=number != FSTAT)
        assert dec is not None
        checked_rval(dec, name)
        line = dec.get_bytes(STAT_LINE_BYTES, f"{name} line")
        dec.finish(f"{name} answer")
        return line.split(b"\0", 1)[0]

    async def file_url(self, path: str) -> str:
        """CONDOR_get_file_info_new: where the shadow says the job's `path` is."""
        dec = await self._call(_arguments(GET_FILE_INFO_NEW, (path,)), "get_file_info_new")
        url = dec.get_string("get_file_info_new url")
        dec.finish("get_file_info_new answer")
        return url

    async def stat_size(self, path: str) -> int | None:
        """CONDOR_stat's st_size for `path`; None where its line does not say."""
        fields = (await self.file_info(STAT, "stat", path)).split()
        return int(fields[7]) if len(fields) == 13 and fields[7].isdigit() else None

    async def dir_listing(self, number: int, name: str, path: str) -> bytes:
        """getdir or getlongdir: the shadow's text (a line per entry, then an empty one)."""
        dec = await self._call(lambda enc: enc.put_int(number).put_string(path), name)
        text = dec.get_raw_string(f"{name} text")
        dec.finish(f"{name} answer")
        return text

    async def getfile(self, path: str) -> bytes:
        """The whole file at `path` (CONDOR_getfile)."""
        return await self.bytes_call(GETFILE, "getfile", path)

    async def readlink(self, path: str, length: int) -> bytes:
        """Where the symbolic link at `path` points, at most `length` bytes."""
        return await self.bytes_call(READLINK, "readlink", path, length)

    async def bytes_call(self, number: int, name: str, *args: str | int) -> bytes:
        """A call answered by a length (an rval) and that many bytes (getfile, read);
        read and pread (which move the descriptor's offset) are not sent again."""
        dec = await self._exchange(_arguments(number, args),
                                   replay=number in (GETFILE, READLINK))  # fmt: skip
        assert dec is not None
        length = checked_rval(dec, name)
        data = dec.get_bytes(length, f"{name} bytes")
        dec.finish(f"{name} answer")
        return data

    async def putfile(self, path: str, mode: int, length: int,
                      opened: Callable[[int], Awaitable[bytes]]) -> int | None:  # fmt: skip
        """CONDOR_putfile: the shadow opens `path` (created, truncated, `mode`) and
        answers (SyscallError where it cannot); `opened(its answer)` then gives the
        `length` bytes to send it (the job's), and the shadow's count of bytes written
        is returned (None for a length of 0: nothing is sent). Where the shadow cannot
        open the file it still answers a second time for a length over 0 (its -1
        count; 25.14.1's NTreceivers), which is read here. The messages go under one
        hold of the connection (nothing may come between them) and are not sent again
        after a reconnect (half would be)."""
        async with self.turns.turn():
            try:
                return await self._putfile_once(path, mode, length, opened)
            except ShadowConnectionLostError as exc:
                if self.link is not None:
                    self.link.lost(exc)
                raise

    async def _putfile_once(self, path: str, mode: int, length: int,
                            opened: Callable[[int], Awaitable[bytes]]) -> int | None:  # fmt: skip
        """putfile's messages (under the lock). With a length over 0 the shadow reads
        a second message after its answer: a cancel or a failure before that one is
        sent (or its answer read) gives the connection up, as the next call's message
        would be taken for putfile's bytes."""
        self.in_call = True
        await self._take_offered()
        channel = self.channel
        try:
            dec = await self._once(lambda enc: enc.put_int(PUTFILE).put_string(path)
                                   .put_int(mode).put_int(length), True)  # fmt: skip
            assert dec is not None
            try:
                fd = _answer(dec, "putfile")
            except SyscallError:
                if length > 0:  # the shadow then also sends its count of bytes written
                    await channel.recv(self.timeout_s)  # (-1), read for nothing
                self.in_call = False
                raise
            data = await opened(fd)
            if length <= 0:
                self.in_call = False
                return None
            dec = await self._once(lambda enc: enc.put_bytes(data), True)
        except SyscallError:
            if self.in_call:  # the shadow's count did not come as it should
                self.give_up(channel)
            raise
        except BaseException:
            if length > 0:
                self.give_up(channel)
            raise
        assert dec is not None
        self.in_call = False
        return _answer(dec, "putfile buffer")


def _arguments(number: int, args: tuple[str | int | bytes, ...]) -> Callable[[Encoder], Encoder]:
    def build(enc: Encoder) -> Encoder:
        enc.put_int(number)
        for arg in args:
            if isinstance(arg, str):
                enc.put_string(arg)
            elif isinstance(arg, bytes):
                enc.put_bytes(arg)
            else:
                enc.put_int(arg)
        return enc

    return build


def _answer(dec: Decoder, name: str) -> int:
    """A whole answer that is an rval (and its errno when negative: SyscallError)."""
    try:
        return checked_rval(dec, name)
    finally:
        dec.finish(f"{name} answer")
