"""STARTER_PEEK: `condor_tail` reads the end of a running job's files.

The tool connects with the job owner's session (execd.wire.job_owner_session) and
sends one ad: {Out, OutOffset, Err, ErrOffset, TransferFiles = {names},
TransferOffsets = {offsets}, MaxTransferBytes, Version}. As condor_starter's
Starter::peek (starter.cpp), execd answers {Result = true, TransferFiles = {0 for
stdout, 1 for stderr, names}, TransferOffsets = {where each file's bytes start}} and
then each file as ReliSock::put_file sends it (int size + int chunk size, the chunks,
int 666 after an empty file, which travels in the next message), then the number of
files sent; or {Result = false, ErrorString, Retry = true when asking again may work}.

Only those seven attributes of the request are read, and only as literals (condor_tail
sends literals; an expression is never evaluated, and the others are not parsed). A
TransferFiles that is no list is ignored, as condor_starter ignores it; its names must
be literal strings, a repeated name is sent once, and a list longer (as text) than the
job's stdout, stderr and transfer_output_files could need is refused.

Which files: the job's stdout and stderr (the names its starter gives them: with file
transfer `_condor_stdout`/`_condor_stderr`), and by name only those two or a name of
the job's `transfer_output_files`. A name is resolved (symlinks too) inside the job's
sandbox; one that resolves outside it is refused. condor_starter reads the files as the
job's user; execd reads as root, so before anything is opened for reading the path is
held with O_PATH (which opens no device and follows no final symlink), and only a
regular file inside the sandbox that the job's user may read is then opened, through
that handle: a directory swapped for a symlink meanwhile reaches nothing outside. A
directory named is sent as condor_starter's put_file sends one: an empty file, counted.
The file work (resolving, opening, reading) runs on a thread of its own with a time
limit (execd.wire.blocking_worker), so a sandbox on a hung NFS or FUSE mount does not
stop the daemon, nor its exit: a request that runs out of time is answered "retry", or
its connection is dropped mid-file.
A file offset below 0 asks for its last bytes; MaxTransferBytes bounds the bytes of
all files together (condor_starter's arithmetic, quirks included: the stdout offset it
answers for a request that gave one is 0, and only the first named file's offset is
read, from the last number of the list).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from execd.log import get_logger
from execd.wire.blocking_worker import BlockingWorker
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.filetransfer import CHUNK_BYTES, ZERO_FILE_MARKER
from execd.wire.output_files import std_files

log = get_logger("wire")
# What Starter::peek reads of a request; nothing else is parsed.
REQUEST_ATTRS = ("Out", "Err", "OutOffset", "ErrOffset", "TransferFiles", "TransferOffsets",
                 "MaxTransferBytes")  # fmt: skip
SCALAR_TEXT_BYTES = 64  # a literal boolean or number is shorter: a longer value is ignored
NAME_TEXT_BYTES = 4096 + 4  # PATH_MAX, quoted, and the list's separator
# One thread for peeks' file work: a sandbox on a hung mount holds it, and nothing else.
PEEK_IO = BlockingWorker("execd-peek")
PEEK_IO_TIMEOUT_S = 20.0
T = TypeVar("T")


@dataclass(frozen=True)
class JobFiles:
    """What STARTER_PEEK may read of one running job, as condor_starter sees its job."""

    sandbox: Path  # the job's directory, symlinks resolved
    stdout: str | None  # the job ad's Out as the starter rewrites it
    stderr: str | None
    outputs: tuple[str, ...]  # transfer_output_files (the job ad's TransferOutput)
    uid: int  # the user the job runs as


def _name(job: Mapping[str, Any], attr: str) -> str | None:
    value = job.get(attr)
    return value if isinstance(value, str) else None


def std_names(job: Mapping[str, Any], transfer: bool) -> tuple[str | None, str | None]:
    """The job's stdout and stderr where its starter writes them: with file transfer the
    sandbox names execd's starter uses (output_files.std_files, condor_starter's remap of
    jic_shadow.cpp: stderr written to stdout's file takes its name); a discarded one, or
    any without transfer, keeps the job ad's name."""
    out, err = _name(job, "Out"), _name(job, "Err")
    if not transfer:
        return out, err
    sandbox_out, sandbox_err = std_files(job)
    return sandbox_out or out, sandbox_err or err


def job_files(job: Mapping[str, Any], sandbox: Path, transfer: bool, uid: int) -> JobFiles:
    stdout, stderr = std_names(job, transfer)
    listed = _name(job, "TransferOutput") or ""
    outputs = tuple(n for n in listed.replace(",", " ").split() if n)
    return JobFiles(Path(os.path.realpath(sandbox)), stdout, stderr, outputs, uid)


class PeekError(Exception):
    """condor_starter's PeekFailed / PeekRetry answer."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


@dataclass
class PeekFile:
    label: int | str  # 0: stdout, 1: stderr, else the name asked for
    path: str
    offset: int  # where its bytes start (-1: its last bytes)
    answered_offset: int  # what the reply's TransferOffsets says
    size: int = -1  # bytes at most (-1: to its end)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def request_values(wire: WireAd, files: JobFiles) -> dict[str, Any]:
    """The literal values of the request's REQUEST_ATTRS; an expression is left out
    (never evaluated), as is a scalar longer than any literal. PeekError for a
    TransferFiles or TransferOffsets longer than the job's files could need."""
    limit = (len(files.outputs) + 2) * NAME_TEXT_BYTES
    chosen: dict[str, str] = {}
    for key in REQUEST_ATTRS:
        text = wire.get(key)
        if text is None:
            continue
        if key.startswith("Transfer") and len(text) > limit:
            raise PeekError(f"Rejecting request, because its {key} list is longer than "
                            f"the job's files could need ({len(text)} bytes).")  # fmt: skip
        if key.startswith("Transfer") or len(text) <= SCALAR_TEXT_BYTES:
            chosen[key] = text
    ad = to_classad(chosen)
    return {key: ad[key] for key in ad}  # a literal's value; a list of literals or trees


def _transfer_names(values: Mapping[str, Any]) -> list[str]:
    """TransferFiles' names, each once; none when it is no list (condor_starter ignores
    it), PeekError when a name is not a literal string."""
    names = values.get("TransferFiles")
    if not isinstance(names, list):
        return []
    if not all(isinstance(n, str) for n in names):
        raise PeekError("Could not evaluate transfer list.")
    return list(dict.fromkeys(names))


def select_files(values: Mapping[str, Any], files: JobFiles) -> list[PeekFile]:
    """The files a request names, in condor_starter's order; PeekError for a name that
    is not the job's stdout, stderr or one of its transfer_output_files."""
    chosen: list[PeekFile] = []
    want_out, want_err = values.get("Out") is True, values.get("Err") is True
    if want_out and files.stdout is not None:
        chosen.append(PeekFile(0, files.stdout, _int(values.get("OutOffset"), -1), 0))
    if want_err and files.stderr is not None:
        offset = _int(values.get("ErrOffset"), -1)
        chosen.append(PeekFile(1, files.stderr, offset, offset))
    names = _transfer_names(values)
    offsets = [-1] * len(names)
    listed = values.get("TransferOffsets")
    for value in listed if isinstance(listed, list) else []:
        if names and isinstance(value, int) and not isinstance(value, bool):
            offsets[0] = value  # condor_starter's loop never moves past the first
    for name, offset in zip(names, offsets, strict=True):
        if name in (files.stderr, files.stdout):
            if not (want_err if name == files.stderr else want_out):
                chosen.append(PeekFile(name, name, offset, offset))
        elif name in files.outputs:
            chosen.append(PeekFile(name, name, offset, offset))
        else:
            raise PeekError(f"File {name} requested but not authorized to be sent.")
    return chosen


def _inside(path: str, sandbox: Path) -> bool:
    return path == str(sandbox) or path.startswith(str(sandbox) + os.sep)


def _readable(st: os.stat_result, uid: int) -> bool:
    return bool((st.st_uid == uid and st.st_mode & stat.S_IRUSR) or st.st_mode & stat.S_IROTH)


@dataclass(frozen=True)
class Opened:
    """A file of the sandbox as put_file sends it: a regular file's read-only fd, or
    (fd None) a directory, sent as an empty file."""

    fd: int | None
    size: int

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def open_in_sandbox(path: str, files: JobFiles) -> Opened | None:
    """`path` opened if it is a regular file (or a directory) inside the sandbox that
    the job's user may read; None otherwise. It is held with O_PATH first (no device
    is opened that way, and its final symlink is not followed); only once the handle
    is checked is the file opened for reading, through the handle itself."""
    try:
        handle = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(handle)
        if not _inside(os.readlink(f"/proc/self/fd/{handle}"), files.sandbox) or \
                not _readable(st, files.uid):  # fmt: skip
            return None
        if stat.S_ISDIR(st.st_mode):
            return Opened(None, st.st_size)
        if not stat.S_ISREG(st.st_mode):
            return None
        fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return Opened(fd, os.fstat(fd).st_size)
    except OSError:
        return None
    finally:
        os.close(handle)


def plan_sizes(chosen: list[PeekFile], files: JobFiles, max_bytes: int) -> None:
    """Resolve each file inside the sandbox and share `max_bytes` among them
    (condor_starter's arithmetic); PeekError for a name outside the sandbox, or (to be
    retried) one that does not resolve. Blocking file work: for the PEEK_IO thread."""
    remaining = max_bytes
    for item in chosen:
        path = item.path if not item.path or os.path.isabs(item.path) else \
            f"{files.sandbox}{os.sep}{item.path}"  # fmt: skip
        try:
            real = os.path.realpath(path, strict=True)
        except OSError as exc:
            code = exc.errno or 0
            raise PeekError(f"Unable to resolve file {path} to real path. "
                            f"(errno={code}, {os.strerror(code)})", retry=True) from None
        if not _inside(real, files.sandbox):
            raise PeekError(f"Invalid symlink or filename ({real}) outside sandbox "
                            f"({files.sandbox})")  # fmt: skip
        item.path = real
        size = 0
        if (opened := open_in_sandbox(real, files)) is not None:
            size = opened.size
            opened.close()
        if item.offset > 0 and size < item.offset:
            item.offset = item.answered_offset = size
        if remaining < 0:
            size = -1
            if item.offset < 0:
                item.offset = item.answered_offset = 0
        elif item.offset < 0:
            remaining -= size
            item.offset = item.answered_offset = -remaining if remaining < 0 else 0
            if remaining < 0:
                size += remaining
                remaining = 0
        elif remaining > size - item.offset:
            size -= item.offset
            remaining -= size
        else:
            size, remaining = remaining, 0
        item.size = size


async def in_peek_thread(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` on the PEEK_IO thread; TimeoutError after PEEK_IO_TIMEOUT_S."""
    return await PEEK_IO.run(PEEK_IO_TIMEOUT_S, work, *args)


def refusal(error: PeekError) -> dict[str, Any]:
    values: dict[str, Any] = {"Result": False, "ErrorString": str(error).strip()}
    if error.retry:
        values["Retry"] = True
    return values


def _read_at(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset)


async def send_files(channel: Channel, chosen: list[PeekFile], files: JobFiles) -> int:
    """The reply ad, then each file as put_file sends it, then the count; the count."""
    reply = from_values({"Result": True,
                         "TransferFiles": [item.label for item in chosen],
                         "TransferOffsets": [item.answered_offset for item in chosen]})  # fmt: skip
    await channel.send(encode_ad(channel.encoder(), reply).payload())
    sent, marker = 0, False  # an empty file's 666 goes at the head of the next message
    for item in chosen:
        enc = channel.encoder()
        if marker:
            enc.put_int(ZERO_FILE_MARKER)
        opened = await in_peek_thread(open_in_sandbox, item.path, files)
        if opened is None or opened.fd is None:  # put_empty_file: a dummy
            await channel.send(enc.put_int(0).put_int(1).payload())
            marker = True
            if opened is not None:  # a directory's counts (put_file), an unopened file's not
                sent += 1
            continue
        try:
            length = max(opened.size - max(item.offset, 0), 0)
            if 0 <= item.size < length:
                length = item.size
            await channel.send(enc.put_int(length).put_int(CHUNK_BYTES).payload())
            done = 0
            while done < length:
                chunk = await in_peek_thread(_read_at, opened.fd, max(item.offset, 0) + done,
                                             min(CHUNK_BYTES, length - done))  # fmt: skip
                if not chunk:  # it shrank: the peer cannot be told; end the connection
                    raise OSError(f"{item.path} shrank while it was sent")
                await channel.send(chunk)
                done += len(chunk)
        finally:
            opened.close()
        marker = length == 0
        sent += 1
    enc = channel.encoder()
    if marker:
        enc.put_int(ZERO_FILE_MARKER)
    await channel.send(enc.put_int(sent).payload())
    return sent


def plan(wire: WireAd, files: JobFiles) -> list[PeekFile]:
    """The files a request asks for, resolved and sized (blocking: on PEEK_IO)."""
    values = request_values(wire, files)
    chosen = select_files(values, files)
    plan_sizes(chosen, files, _int(values.get("MaxTransferBytes"), -1))
    return chosen


async def serve_peek(channel: Channel, files: JobFiles | None, *, finished: bool,
                     enabled: Callable[[], bool], job: str) -> None:  # fmt: skip
    """One STARTER_PEEK request from the job's owner (already authorized); `enabled`
    asks ENABLE_PEEK_JOB."""
    wire = decode_ad(channel.decoder(await channel.recv()), "STARTER_PEEK ad")
    try:
        if not enabled():
            raise PeekError("Rejecting request, because ENABLE_PEEK_JOB=false")
        if files is None:
            raise PeekError("Retrying request, because the job execution environment "
                            "is not yet ready.", retry=True)  # fmt: skip
        if finished:
            raise PeekError("Rejecting request, because the job is finished.")
        try:
            chosen = await in_peek_thread(plan, wire, files)
        except TimeoutError:
            raise PeekError("Retrying request, because the job's files did not answer "
                            f"within {PEEK_IO_TIMEOUT_S:g} s.", retry=True) from None  # fmt: skip
    except PeekError as refused:
        log.info("peek_refused", job=job, why=str(refused).strip(), retry=refused.retry)
        await channel.send(encode_ad(channel.encoder(), from_values(refusal(refused))).payload())
        return
    sent = await send_files(channel, chosen, files)
    log.info("peek_sent", job=job, files=[str(item.label) for item in chosen], sent=sent)
