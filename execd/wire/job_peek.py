"""STARTER_PEEK: `condor_tail` reads the end of a running job's files.

The tool connects with the job owner's session (execd.wire.job_owner_session) and
sends one ad: {Out, OutOffset, Err, ErrOffset, TransferFiles = {names},
TransferOffsets = {offsets}, MaxTransferBytes, Version}. As condor_starter's
Starter::peek (starter.cpp), execd answers {Result = true, TransferFiles = {0 for
stdout, 1 for stderr, names}, TransferOffsets = {where each file's bytes start}} and
then each file as ReliSock::put_file sends it (int size + int chunk size, the chunks,
int 666 after an empty file, which travels in the next message), then the number of
files sent; or {Result = false, ErrorString, Retry = true when asking again may work}.

Which files: the job's stdout and stderr (the names its starter gives them: with file
transfer `_condor_stdout`/`_condor_stderr`), and by name only those two or a name of
the job's `transfer_output_files`. A name is resolved (symlinks too) inside the job's
sandbox; one that resolves outside it is refused. Files are opened without following a
symlink swapped in later, and only regular files the job's user may read are sent
(condor_starter reads them as that user; execd reads as root, so it checks).
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
from typing import Any

from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad
from execd.wire.filetransfer import CHUNK_BYTES, ZERO_FILE_MARKER

log = get_logger("wire")
STDOUT_REMAP, STDERR_REMAP = "_condor_stdout", "_condor_stderr"
NULL_FILE = "/dev/null"


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


def job_files(job: Mapping[str, Any], sandbox: Path, transfer: bool, uid: int) -> JobFiles:
    """With file transfer the starter renames stdout and stderr (jic_shadow.cpp), unless
    they are streamed or /dev/null; stderr written to stdout's file takes its name."""
    out, err = _name(job, "Out"), _name(job, "Err")
    new_out, new_err = out, err
    if transfer and job.get("StreamOut") is False and out is not None and out != NULL_FILE:
        new_out = STDOUT_REMAP
    if transfer and job.get("StreamErr") is False and err is not None and err != NULL_FILE:
        new_err = STDOUT_REMAP if err == out else STDERR_REMAP
    listed = _name(job, "TransferOutput") or ""
    outputs = tuple(n for n in listed.replace(",", " ").split() if n)
    return JobFiles(Path(os.path.realpath(sandbox)), new_out, new_err, outputs, uid)


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


def select_files(request: Any, files: JobFiles) -> list[PeekFile]:
    """The files a request names, in condor_starter's order; PeekError for a name that
    is not the job's stdout, stderr or one of its transfer_output_files."""
    chosen: list[PeekFile] = []
    want_out, want_err = request.get("Out") is True, request.get("Err") is True
    if want_out and files.stdout is not None:
        chosen.append(PeekFile(0, files.stdout, _int(request.get("OutOffset"), -1), 0))
    if want_err and files.stderr is not None:
        offset = _int(request.get("ErrOffset"), -1)
        chosen.append(PeekFile(1, files.stderr, offset, offset))
    names = request.get("TransferFiles")
    if names is None:
        return chosen
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PeekError("Could not evaluate transfer list.")
    offsets = [-1] * len(names)
    listed = request.get("TransferOffsets")
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


def open_in_sandbox(path: str, files: JobFiles) -> int | None:
    """A read-only fd of `path` if it is, once open, a regular file inside the sandbox
    that the job's user may read; None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    readable = (st.st_uid == files.uid and st.st_mode & stat.S_IRUSR) or \
        st.st_mode & stat.S_IROTH  # fmt: skip
    if not stat.S_ISREG(st.st_mode) or not readable or \
            not _inside(os.readlink(f"/proc/self/fd/{fd}"), files.sandbox):  # fmt: skip
        os.close(fd)
        return None
    return fd


def plan_sizes(chosen: list[PeekFile], files: JobFiles, max_bytes: int) -> None:
    """Resolve each file inside the sandbox and share `max_bytes` among them
    (condor_starter's arithmetic); PeekError for a name outside the sandbox, or (to be
    retried) one that does not resolve."""
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
        if (fd := open_in_sandbox(real, files)) is not None:
            size = os.fstat(fd).st_size
            os.close(fd)
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


def refusal(error: PeekError) -> dict[str, Any]:
    values: dict[str, Any] = {"Result": False, "ErrorString": str(error).strip()}
    if error.retry:
        values["Retry"] = True
    return values


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
        fd = open_in_sandbox(item.path, files)
        if fd is None:  # put_empty_file: a dummy, not counted
            await channel.send(enc.put_int(0).put_int(1).payload())
            marker = True
            continue
        try:
            length = max(os.fstat(fd).st_size - max(item.offset, 0), 0)
            if 0 <= item.size < length:
                length = item.size
            await channel.send(enc.put_int(length).put_int(CHUNK_BYTES).payload())
            os.lseek(fd, max(item.offset, 0), os.SEEK_SET)
            done = 0
            while done < length:
                chunk = os.read(fd, min(CHUNK_BYTES, length - done))
                if not chunk:  # it shrank: the peer cannot be told; end the connection
                    raise OSError(f"{item.path} shrank while it was sent")
                await channel.send(chunk)
                done += len(chunk)
        finally:
            os.close(fd)
        marker = length == 0
        sent += 1
    enc = channel.encoder()
    if marker:
        enc.put_int(ZERO_FILE_MARKER)
    await channel.send(enc.put_int(sent).payload())
    return sent


async def serve_peek(channel: Channel, files: JobFiles | None, *, finished: bool,
                     enabled: Callable[[], bool], job: str) -> None:  # fmt: skip
    """One STARTER_PEEK request from the job's owner (already authorized); `enabled`
    asks ENABLE_PEEK_JOB."""
    request = to_classad(decode_ad(channel.decoder(await channel.recv()), "STARTER_PEEK ad"))
    values = {key: request.eval(key) for key in request}
    try:
        if not enabled():
            raise PeekError("Rejecting request, because ENABLE_PEEK_JOB=false")
        if files is None:
            raise PeekError("Retrying request, because the job execution environment "
                            "is not yet ready.", retry=True)  # fmt: skip
        if finished:
            raise PeekError("Rejecting request, because the job is finished.")
        chosen = select_files(values, files)
        plan_sizes(chosen, files, _int(values.get("MaxTransferBytes"), -1))
    except PeekError as refused:
        log.info("peek_refused", job=job, why=str(refused).strip(), retry=refused.retry)
        await channel.send(encode_ad(channel.encoder(), from_values(refusal(refused))).payload())
        return
    sent = await send_files(channel, chosen, files)
    log.info("peek_sent", job=job, files=[str(item.label) for item in chosen], sent=sent)

