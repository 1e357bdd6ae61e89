"""Chirp's file calls (`condor_chirp fetch`, `put`, `remove`, `rmdir`, `getdir`,
`stat`, `chmod`, `read`, `write`, ...) on the shadow's files.

As condor_starter serves them (io_proxy_handler.cpp, NTsenders.cpp) to a job whose ad
says `WantIOProxy = true` where ENABLE_CHIRP_IO allows it (chirp_config.py): each is
the shadow's remote system call, on the submit side, where the shadow decides what the
job may touch. execd never opens a path the job names: the job's own condor_chirp
reads and writes its local files; the proxy passes bytes between it and the shadow.

- `getfile PATH` (fetch): CONDOR_getfile; the answer is the length, then the bytes.
- `putfile PATH MODE LENGTH` (put): CONDOR_putfile opens the file; its answer goes to
  the client, which then sends LENGTH bytes, passed on to the shadow in a second
  message; the shadow's count of bytes written is the second answer line.
- `unlink`, `rename`, `mkdir`, `rmdir`, `rmall`, `link`, `symlink`, `access`,
  `chmod`, `chown`, `lchown`, `truncate`, `utime` (RVAL_CALLS): the call's rval.
- `stat`, `lstat`, `statfs`: 0, then the shadow's line of numbers.
- `getdir`, `getlongdir`: the length, then the shadow's listing.
- `readlink PATH LENGTH`: the length, then where the link points.
- `open PATH LETTERS MODE`: the path as the shadow maps it (get_file_info_new), opened
  with HTCondor's wire flags; the descriptor (the shadow's), then its fstat line.
  `close`, `lseek`, `read`/`pread` (the length, then the bytes) on it, and
  `write`/`pwrite`, whose bytes follow the request line (read before the call).
- On an open descriptor: `fsync FD`, `fchown FD UID GID`, `fchmod FD MODE`,
  `ftruncate FD LENGTH` (the rval); `fstat FD` and `fstatfs FD` (0, then the stat
  line: condor_starter's REMOTE_CONDOR_fstatfs sends CONDOR_fstat, so both are the
  descriptor's fstat); `sread FD LENGTH OFFSET STRIDE SKIP` (as read) and `swrite ...`
  (as write): the shadow reads or writes STRIDE bytes every SKIP from OFFSET.
- `lookup PATH`: where the shadow maps PATH (get_file_info_new: the length, then its
  URL as it is, `remote:` and all). `whoami LENGTH`, `whoareyou HOST LENGTH`: the
  shadow's own answer (the length, then the text; it refuses a LENGTH over 1024).
- `constrain EXPR` (an update, not a file call, but an rval call like these).

Sizes are bounded (FILE_MAX, under the wire's 64 MiB message; and the bytes held at
once by the job's and the daemon's budgets, chirp_budget.py): a put of more, or of a
negative length, is answered -5 (too big) without reaching the shadow; before a
getfile execd asks the shadow the file's size (CONDOR_stat) and answers -5 for a
larger one, as a reply over the wire's limit would cost the shadow's connection. The
client's bytes of a put must arrive within DATA_WAIT_S: what is missing is sent as
zeros (the shadow waits for that many; condor_starter sends its buffer as it is) and
the proxy closes the client's connection. A read asks for at most FILE_MAX bytes; a
write of more, or whose bytes do not arrive in time, ends its connection. A negative
length of read, pread, sread, write, pwrite, swrite, whoami or whoareyou is answered
-7 (condor_starter's malloc of it fails) without reaching the shadow, and the
connection goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire.chirp_budget import BufferHold
from execd.wire.chirp_protocol import (
    INVALID_REQUEST,
    NO_MEMORY,
    OFFLINE,
    TOO_BIG,
    as_sent,
    chirp_error,
)
from execd.wire.shadow_syscalls import SyscallError

log = get_logger("wire")

FILE_MAX = 32 * 1024 * 1024
DATA_WAIT_S = 20.0
_INT = re.compile(r"[+-]?[0-9]{1,10}")  # %d as strtol reads a whole word


# Requests that are one call on the shadow answering an rval: (its number, what follows
# the path: "s" another path, "d" an integer, as sscanf_chirp reads %s and %d).
RVAL_CALLS = {
    "unlink": (115, ""), "rename": (78, "s"), "mkdir": (58, "d"), "rmdir": (79, ""),
    "rmall": (292, ""), "link": (52, "s"), "symlink": (111, "s"), "access": (1, "d"),
    "chmod": (7, "d"), "chown": (8, "dd"), "lchown": (251, "dd"), "truncate": (113, "d"),
    "utime": (242, "dd"),
    "constrain": (287, ""),  # no file: the job's Requirements (an update, UPDATES)
}  # fmt: skip
INFO_CALLS = {"statfs": 109, "stat": 108, "lstat": 55}  # a line of numbers back
LISTING_CALLS = {"getlongdir": 295, "getdir": 296}  # a line per entry back
# Calls on the shadow's descriptors (condor_chirp read, write, put -mode): open gives one.
OPEN, CLOSE, LSEEK, READ, PREAD, FSTAT, WRITE, PWRITE = 66, 10, 54, 71, 289, 24, 120, 290
READLINK = 72
SREAD, SWRITE, WHOAMI, WHOAREYOU = 299, 291, 297, 298
DESCRIPTOR_CALLS = ("open", "close", "lseek", "read", "pread", "sread")
# rval calls on a descriptor: their numbers (every argument an integer)
FD_RVAL_CALLS = {"fsync": 26, "fchown": 20, "fchmod": 19, "ftruncate": 27}
# fstatfs too is sent as CONDOR_fstat, as condor_starter's REMOTE_CONDOR_fstatfs sends it
FD_INFO_CALLS = {"fstat": FSTAT, "fstatfs": FSTAT}
WHO_CALLS = {"whoami": WHOAMI, "whoareyou": WHOAREYOU}
WHO_MAX = 1024  # the most the shadow answers whoami and whoareyou with
WITH_DATA = ("write", "pwrite", "swrite")  # the client's bytes follow the request line
# open's letters as HTCondor's open flags on the wire (condor_io/open_flags.cpp)
O_WRONLY, O_RDWR, O_CREAT, O_TRUNC, O_EXCL, O_APPEND = 0x1, 0x2, 0x100, 0x200, 0x400, 0x1000
CALLS = frozenset([*RVAL_CALLS, *INFO_CALLS, *LISTING_CALLS, *DESCRIPTOR_CALLS, "getfile",
                   "readlink", *FD_RVAL_CALLS, *FD_INFO_CALLS, *WHO_CALLS, "lookup"])  # fmt: skip


class FileShadow(Protocol):
    """The shadow's file calls the proxy passes requests to (ShadowFileCalls has them)."""

    async def getfile(self, path: str) -> bytes: ...
    async def readlink(self, path: str, length: int) -> bytes: ...
    async def stat_size(self, path: str) -> int | None: ...
    async def file_call(self, number: int, name: str, *args: str | int | bytes) -> int: ...
    async def file_info(self, number: int, name: str, what: str | int) -> bytes: ...
    async def file_url(self, path: str) -> str: ...
    async def bytes_call(self, number: int, name: str, *args: str | int) -> bytes: ...
    async def dir_listing(self, number: int, name: str, path: str) -> bytes: ...
    async def putfile(self, path: str, mode: int, length: int,
                      opened: Callable[[int], Awaitable[bytes]]) -> int | None: ...


def line(value: int) -> bytes:
    return f"{value}\n".encode()


def integer(word: str) -> int | None:
    """A word as sscanf_chirp's %d reads it (a C int); None where it is none."""
    if not _INT.fullmatch(word) or not -(2**31) <= (value := int(word)) < 2**31:
        return None
    return value


def integers(words: list[str]) -> list[int] | None:
    """Each word as integer() reads it; None where one is no number."""
    values = [integer(word) for word in words]
    return None if None in values else [v for v in values if v is not None]


async def call(shadow: FileShadow, command: str, args: list[str], hold: BufferHold) -> bytes:
    """Any of CALLS but putfile: the answer line, and the bytes some have after it
    (those of read, pread, readlink and getfile taken from `hold` first)."""
    path = args[0]
    if command == "getfile":
        return await fetch(shadow, path, hold)
    if command in INFO_CALLS:
        text = await shadow.file_info(INFO_CALLS[command], command, path)
        return line(0) + text
    if command in LISTING_CALLS:
        text = await shadow.dir_listing(LISTING_CALLS[command], command, path)
        return line(len(text)) + text
    if command == "open":
        return await open_file(shadow, path, args[1], args[2])
    if command in DESCRIPTOR_CALLS or command == "readlink":
        return await descriptor_call(shadow, command, args, hold)
    if command in FD_RVAL_CALLS or command in FD_INFO_CALLS:
        return await on_descriptor(shadow, command, args)
    if command in WHO_CALLS:
        return await who(shadow, command, args, hold)
    if command == "lookup":
        url = as_sent(await shadow.file_url(path))  # a submit directory need not be UTF-8
        return line(len(url)) + url
    number, kinds = RVAL_CALLS[command]
    more: list[str | int] = []
    for kind, word in zip(kinds, args[1:], strict=True):
        value = word if kind == "s" else integer(word)
        if value is None:
            log.debug("chirp_request_refused", reason=f"{command}: {word[:20]!r} is no number")
            return line(INVALID_REQUEST)
        more.append(value)
    return line(await shadow.file_call(number, command, path, *more))


def open_flags(letters: str) -> int:
    """condor_starter's reading of open's letters: w (and r) write, c t x a."""
    flags = (O_RDWR if "r" in letters else O_WRONLY) if "w" in letters else 0
    for letter, flag in (("c", O_CREAT), ("t", O_TRUNC), ("x", O_EXCL), ("a", O_APPEND)):
        flags |= flag if letter in letters else 0
    return flags


async def open_file(shadow: FileShadow, path: str, letters: str, mode_word: str) -> bytes:
    """`open PATH FLAGS MODE`: the path as the shadow maps it (get_file_info_new, its
    `remote:` prefix dropped), opened there; the descriptor, then its fstat line."""
    if (mode := integer(mode_word)) is None:
        return line(INVALID_REQUEST)
    url = await shadow.file_url(path)
    for prefix in ("remote:", "buffer:remote:"):
        if url.startswith(prefix):
            url = url[len(prefix):]
            break
    fd = await shadow.file_call(OPEN, "open", open_flags(letters), mode, url)
    info = b""
    with contextlib.suppress(SyscallError):
        info = await shadow.file_info(FSTAT, "fstat", fd)
    return line(fd) + (info or b"\n")


async def descriptor_call(shadow: FileShadow, command: str, args: list[str],
                          hold: BufferHold) -> bytes:  # fmt: skip
    """close, lseek, read, pread (numbers only) and readlink (a path and a length)."""
    values = integers(args[1:] if command == "readlink" else args)
    if values is None:
        return line(INVALID_REQUEST)
    if command == "close":
        return line(await shadow.file_call(CLOSE, "close", values[0]))
    if command == "lseek":
        if values[2] not in (0, 1, 2):  # SEEK_SET, SEEK_CUR, SEEK_END
            return line(INVALID_REQUEST)
        return line(await shadow.file_call(LSEEK, "lseek", *values))
    asked = values[1 if command in ("pread", "sread") else -1]  # the most bytes asked for
    if asked < 0 and command != "readlink":  # condor_starter's malloc of it fails (for
        return line(NO_MEMORY)  # read it then writes no answer at all: see docs/pool.md)
    if not 0 <= asked <= FILE_MAX or not hold.take(asked):
        return line(TOO_BIG)
    if command == "readlink":
        data = await shadow.bytes_call(READLINK, "readlink", args[0], values[0])
    else:
        number = {"read": READ, "pread": PREAD, "sread": SREAD}[command]
        data = await shadow.bytes_call(number, command, *values)
    return line(len(data)) + data


async def on_descriptor(shadow: FileShadow, command: str, args: list[str]) -> bytes:
    """fsync, fchown, fchmod, ftruncate (the rval), fstat and fstatfs (0 and the line)."""
    values = integers(args)
    if values is None:
        return line(INVALID_REQUEST)
    if command in FD_INFO_CALLS:
        return line(0) + await shadow.file_info(FD_INFO_CALLS[command], command, values[0])
    return line(await shadow.file_call(FD_RVAL_CALLS[command], command, *values))


async def who(shadow: FileShadow, command: str, args: list[str], hold: BufferHold) -> bytes:
    """`whoami LENGTH`, `whoareyou HOST LENGTH`: the length, then the shadow's text."""
    length = integer(args[-1])
    if length is None:
        return line(INVALID_REQUEST)
    if length < 0:  # condor_starter's malloc of it fails
        return line(NO_MEMORY)
    if not hold.take(min(length, WHO_MAX)):
        return line(TOO_BIG)
    data = await shadow.bytes_call(WHO_CALLS[command], command, *args[:-1], length)
    return line(len(data)) + data


async def fetch(shadow: FileShadow, path: str, hold: BufferHold) -> bytes:
    """`getfile`: the length and the bytes, or -5 for a file over FILE_MAX (or one
    whose size the budgets cannot hold now)."""
    size: int | None = None
    with contextlib.suppress(SyscallError):  # the getfile itself says what is wrong
        size = await shadow.stat_size(path)
    if (size is not None and size > FILE_MAX) or not hold.take(FILE_MAX if size is None else size):
        return line(TOO_BIG)
    data = await shadow.getfile(path)
    return line(len(data)) + data


async def write(shadow: FileShadow, command: str, args: list[str],
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, job: str,
                connected: Callable[[], bool], hold: BufferHold) -> bytes:  # fmt: skip
    """`write FD LENGTH`, `pwrite FD LENGTH OFFSET`, `swrite FD LENGTH OFFSET STRIDE
    SKIP`, the client's LENGTH bytes right after the line: read first (as condor_starter
    does), then sent to the shadow. Bytes that do not all arrive within DATA_WAIT_S, or a
    length over FILE_MAX, are answered (-8, -5) and end the connection (what follows
    could not be read as requests); a negative length is answered -7 (no bytes follow
    it) and the connection goes on, as condor_starter's."""
    values = integers(args)
    if values is None:
        return line(INVALID_REQUEST)
    length = values[1]
    if length < 0:  # condor_starter's malloc of it fails; no bytes follow
        return line(NO_MEMORY)
    if not 0 <= length <= FILE_MAX or not hold.take(length):
        writer.write(line(TOO_BIG))  # the bytes that follow are not read
        raise ConnectionError(f"{command} of {length} bytes")
    try:
        async with asyncio.timeout(DATA_WAIT_S):
            data = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, TimeoutError):
        writer.write(line(INVALID_REQUEST))
        raise ConnectionError(f"{command}: the client's bytes did not all arrive") from None
    number = {"write": WRITE, "pwrite": PWRITE, "swrite": SWRITE}[command]
    return await answered(shadow.file_call(number, command, *values, data), job=job,
                          what=command, connected=connected)  # fmt: skip


async def answered(call: Coroutine[Any, Any, int], *, job: str, what: str,
                   connected: Callable[[], bool]) -> bytes:  # fmt: skip
    """An rval call's answer line, its failure as Chirp's error."""
    if not connected():
        call.close()
        return line(OFFLINE)
    try:
        return line(await call)
    except SyscallError as exc:
        log.debug("chirp_call_refused", job=job, attr=what, errno=exc.errno)
        return line(chirp_error(exc.errno))
    except ProtocolError as exc:
        log.warning("chirp_call_failed", job=job, attr=what,
                    error=str(exc) or type(exc).__name__)  # fmt: skip
        return line(OFFLINE)


async def put(shadow: FileShadow, args: list[str], reader: asyncio.StreamReader,
              writer: asyncio.StreamWriter, *, job: str,
              connected: Callable[[], bool], hold: BufferHold) -> bytes:  # fmt: skip
    """`putfile PATH MODE LENGTH`: the shadow's first answer is written here, before
    the client sends its bytes; what is returned is the second (nothing for a length
    of 0), or the failure's Chirp error. Not under the proxy's call timeout: the
    client's bytes follow the first answer."""
    numbers = integers(args[1:3])  # MODE and LENGTH
    if numbers is None:
        log.debug("chirp_request_refused", job=job, reason="putfile's mode or length")
        return line(INVALID_REQUEST)
    mode, length = numbers
    if not 0 <= length <= FILE_MAX or not hold.take(length):
        return line(TOO_BIG)
    if not connected():
        return line(OFFLINE)
    incomplete = False

    async def opened(fd: int) -> bytes:
        nonlocal incomplete
        try:
            writer.write(line(fd))
            await writer.drain()
            if length <= 0:
                return b""
            async with asyncio.timeout(DATA_WAIT_S):
                return await reader.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            data = exc.partial
        except (TimeoutError, ConnectionError):
            data = b""
        if length <= 0:
            return b""
        incomplete = True  # the shadow waits for `length` bytes all the same
        log.warning("chirp_put_incomplete", job=job, expected=length, got=len(data))
        return data + bytes(length - len(data))

    try:
        written = await shadow.putfile(args[0], mode, length, opened)
    except SyscallError as exc:
        log.debug("chirp_call_refused", job=job, attr="putfile", errno=exc.errno)
        return line(chirp_error(exc.errno))
    except ProtocolError as exc:
        log.warning("chirp_call_failed", job=job, attr="putfile",
                    error=str(exc) or type(exc).__name__)  # fmt: skip
        return line(OFFLINE)
    if incomplete:
        raise ConnectionError("the client's bytes did not all arrive")
    return b"" if written is None else line(written)
