"""The output's upload, the starter's side of FILETRANS_DOWNLOAD (the protocol:
execd/wire/filetransfer.py): the items output_files lists, sent in order — a mkdir's
mode, a file's mode, size, chunks — from one thread with the job user's file-access
ids (execd/wire/owner_thread.py) that lists, opens and reads, so the event loop never
waits on the sandbox's file system and root's rights are never used for the job's files.
"""

from __future__ import annotations

import errno as errnos
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from execd.log import get_logger
from execd.wire.classad_codec import encode_ad
from execd.wire.filetransfer import (
    CHUNK_BYTES,
    CMD_FILE,
    CMD_FINISHED,
    CMD_MKDIR,
    HOLD_DOWNLOAD_FILE_ERROR,
    HOLD_UPLOAD_FILE_ERROR,
    MISSING_FILE_MODE,
    ZERO_FILE_MARKER,
    TransferResult,
    ack_ad,
    go_ahead,
    peer_failure,
    peer_name,
    recv_ad,
    send_int,
)
from execd.wire.output_files import OutputItem, OutputListError, input_baseline
from execd.wire.owner_thread import OwnerThread, OwnerThreadTimeoutError
from execd.wire.shadow_syscalls import MessageChannel

# Seconds one open, read or the listing may take in the upload's thread (the 200 written
# in jic_shadow.cpp's param_integer("STARTER_UPLOAD_TIMEOUT", 200) calls; the knob's
# effective default there is 300, param_info.in's). Past it the job is held (13, ETIMEDOUT).
log = get_logger("wire")
OUTPUT_IO_TIMEOUT_S = 200.0


def _close(opened: tuple[int, int, int]) -> None:
    if opened[0] >= 0:
        os.close(opened[0])


async def _send_file(ch: MessageChannel, opened: tuple[int, int, int],
                     worker: OwnerThread) -> int:  # fmt: skip
    """Mode, size + chunk size, the chunks (666 after an empty file); the reads in the
    upload's thread (a slow file system never holds the event loop)."""
    fd, mode, size = opened
    try:  # (a read that times out fails the transfer: send_output holds the job)
        await send_int(ch, mode)
        await ch.send(ch.encoder().put_int(size).put_int(CHUNK_BYTES).payload())
        sent = 0
        while sent < size:
            chunk = await worker.call(os.read, fd, min(CHUNK_BYTES, size - sent))
            if not chunk:
                # the job's (a process left behind truncated it): a hold, not a crash
                raise OSError(errnos.EIO, "a file shrank while being sent")
            await ch.send(chunk)
            sent += len(chunk)
    finally:
        if fd >= 0:  # behind a read still queued or running: the number is never reused under it
            worker.post(os.close, fd)
    if size == 0:
        await send_int(ch, ZERO_FILE_MARKER)
    return sent


def _open_item(sandbox: Path, item: OutputItem, root_owned: bool) -> tuple[int, int, int]:
    """(descriptor, mode, size) to read the item from; descriptor -1 for a device (sent
    empty, never opened). In the upload's thread, so with the job user's file-access
    rights, as condor_starter's transfer (which runs as the user) opens it: a file the
    user cannot read is not sent, wherever a link points. The file opened is the one
    listed: its path is pinned by an O_PATH descriptor (no link followed, nothing
    opened for real: no tty taken as controlling terminal, no FIFO waited on), which
    must be a regular file with the listed inode, then reopened for reading (O_NOCTTY
    all the same). A sandbox root owns (no user's yet: a failed input transfer) is
    read as root, but never through a link out of it."""
    if item.error:
        raise OSError(item.error, os.strerror(item.error))
    if item.linked_directory:
        raise OSError(errnos.EISDIR, os.strerror(errnos.EISDIR))
    if item.device:
        return -1, item.mode, 0
    if root_owned and item.outside:
        raise OSError(errnos.EACCES, os.strerror(errnos.EACCES))
    path = os.path.realpath(sandbox / item.source) if item.link else sandbox / item.source
    pinned = os.open(path, os.O_PATH | os.O_NOFOLLOW)
    try:
        st = os.fstat(pinned)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != item.inode:
            raise OSError(errnos.ESTALE, "changed since the output was listed")
        fd = os.open(f"/proc/self/fd/{pinned}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    finally:
        os.close(pinned)
    return fd, stat.S_IMODE(st.st_mode) & 0o777, st.st_size


async def _send_item(ch: MessageChannel, sandbox: Path, item: OutputItem, *,
                     worker: OwnerThread, result: TransferResult) -> int:  # fmt: skip
    """One item after its command and name: a mkdir's mode, or a file; the first
    failure is kept in `result` (the transfer goes on, as HTCondor's)."""
    if item.directory and not item.linked_directory:
        await send_int(ch, item.mode)
        return 4  # HTCondor counts a mkdir as the size of its mode
    try:
        opened = await worker.call(_open_item, sandbox, item, worker.owner[0] == 0,
                                   discard=_close)  # fmt: skip
    except OSError as exc:
        code = exc.errno or errnos.EIO
        # As put_file_with_permissions: the dummy's mode when even stat failed, else the
        # file's mode (/dev/null's for a link to a directory) and an empty file
        mode = MISSING_FILE_MODE if item.error and not item.device else \
            0o666 if item.linked_directory else item.mode  # fmt: skip
        await send_int(ch, mode)
        await ch.send(ch.encoder().put_int(0).put_int(1).payload())
        await send_int(ch, ZERO_FILE_MARKER)
        why = f"reading from file {sandbox / item.source}: (errno {code}) " + (
            str(exc.strerror) if isinstance(exc, OwnerThreadTimeoutError) else os.strerror(code))
        if item.linked_directory:
            why += "- Transfer of symlinks to directories is not supported."
        result.failures += 1
        result.fail(HOLD_UPLOAD_FILE_ERROR, code, why)
        return 0
    return await _send_file(ch, opened, worker)


Selection = Callable[[], Sequence[OutputItem]]


async def upload_sandbox(ch: MessageChannel, sandbox: Path, select: Selection, *,
                         final: bool = True,
                         io_timeout_s: float = OUTPUT_IO_TIMEOUT_S) -> TransferResult:  # fmt: skip
    """Send the sandbox items `select` lists (output_files.output_items, run in the
    upload's thread with the job user's file-access ids) to the shadow (after
    FILETRANS_DOWNLOAD + key): mkdir for a directory, then the files; one that cannot
    be read goes as the dummy and the transfer goes on, then fails with the first
    error, as HTCondor's. An output that cannot be listed (OutputListError) is sent as
    no files and a failure: the job is held. `final` False: an evicted job's sandbox,
    which the shadow keeps in the job's spool (and sends back as input to its next run).
    A listing, open or read that takes longer than `io_timeout_s` (a hung file system)
    fails the transfer (ETIMEDOUT) and its thread is abandoned."""
    result = TransferResult()
    worker = OwnerThread(_owner(sandbox), name="output-as-owner", timeout_s=io_timeout_s)
    try:
        try:
            items = await worker.call(select)
        except (OutputListError, OwnerThreadTimeoutError) as exc:
            items = []
            result.fail(HOLD_UPLOAD_FILE_ERROR, exc.errno or errnos.EIO,
                        f"|Error: listing the output files: {exc.strerror}")  # fmt: skip
        total = sum(item.size for item in items)
        header = ch.encoder().put_int(1 if final else 0)
        await ch.send(encode_ad(header, {"SandboxSize": str(total)}).payload())
        for i, item in enumerate(items):
            mkdir = item.directory and not item.linked_directory
            await send_int(ch, CMD_MKDIR if mkdir else CMD_FILE)
            await ch.send(ch.encoder().put_string(item.name).payload())
            if i == 0:
                await go_ahead(ch, downloading=False)
            result.bytes += await _send_item(ch, sandbox, item, worker=worker, result=result)
            result.files.append(item.name)
    finally:
        worker.close()  # never waits: a stuck open ends in its own time, its fd discarded
    if result.failures:
        result.hold_reason = (f"|Error: {result.failures} total failures: "
                              f"first failure: {result.hold_reason}")  # fmt: skip
    await send_int(ch, CMD_FINISHED)
    await ch.send(encode_ad(ch.encoder(), ack_ad(result, _sender(ch))).payload())
    peer = await recv_ad(ch, "downloader's ack")
    if not result.ok:
        result.hold_reason = f"{_sender(ch)}: {result.hold_reason}"
    if peer.get("Result") != 0:
        peer_failure(peer, result, HOLD_DOWNLOAD_FILE_ERROR)
    return result


async def sandbox_baseline(sandbox: Path, gjid: str,
                           io_timeout_s: float = OUTPUT_IO_TIMEOUT_S) -> dict[str, float]:
    """input_baseline, off the event loop in a thread with the job user's file-access
    ids (a plugin may have left links to anywhere): a listing that fails or takes longer
    than `io_timeout_s` (a hung file system) is logged and the baseline is empty (every
    file then counts as changed)."""
    worker = OwnerThread(_owner(sandbox), name="baseline-as-owner", timeout_s=io_timeout_s)
    try:
        return await worker.call(input_baseline, str(sandbox))
    except OSError as exc:
        log.warning("sandbox_baseline_not_listed", job=gjid, error=str(exc))
        return {}
    finally:
        worker.close()


def _owner(sandbox: Path) -> tuple[int, int]:
    """The job's user: the sandbox's owner (the starter gives it the sandbox)."""
    st = os.stat(sandbox)
    return st.st_uid, st.st_gid


def _sender(ch: MessageChannel) -> str:
    """`STARTER at <ip> failed to send file(s) to <peer>`, HTCondor's words."""
    local = getattr(ch, "local_address", None)
    return f"STARTER at {local[0] if local else '?'} failed to send file(s) to {peer_name(ch)}"
