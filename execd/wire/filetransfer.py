"""HTCondor's file transfer protocol, the starter's side (condor_utils/file_transfer.cpp).

The starter connects to the job ad's TransferSocket, resumes the `filetrans.<sid>`
session the shadow handed it (get_sec_session_info), sends FILETRANS_UPLOAD (61000: the
shadow uploads the input sandbox) or FILETRANS_DOWNLOAD (61001: the shadow downloads
the output), then the job's secret TransferKey. On that AES-GCM connection:

- the uploader sends int final_transfer (1 for the output, 0 for the input and for an
  evicted ON_EXIT_OR_EVICT job's sandbox, which the shadow spools) + ad {SandboxSize};
- per file: int command (1 file, 6 mkdir, 4 the job's X509 proxy, delegated:
  execd/wire/x509_delegation.py; 5 a URL the starter fetches itself with a plugin:
  execd/wire/url_inputs.py; 0 finished), the name; before the first file
  the GoAhead exchange: the downloader reads the uploader's alive interval and sends
  {Result = 2 (go ahead always), MaxTransferBytes}, sends its own alive interval and
  reads the uploader's {Result = 2} (the uploader does the two halves in the other
  order);
- a file: int mode (1<<24: the uploader could not read it, the bytes are a dummy),
  int size + int chunk size, then each chunk its own message; a zero-length file is
  followed by int 666; a mkdir: int mode;
- then the uploader's ack {Result, TransferStats} and the downloader's ack; Result < 0
  carries HoldReasonCode/HoldReasonSubCode/HoldReason (the job goes on hold).

The uploading side (the output) is execd/wire/sandbox_upload.py.

Names from the peer are confined to the sandbox: an absolute name or one with `..` is
consumed into nothing and fails the transfer (hold code 12, EPERM), as HTCondor does.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.shadow_syscalls import MessageChannel
from execd.wire.transfer_plugins import SUBCODE_EXEC_FAILED, url_safe
from execd.wire.url_inputs import CMD_DOWNLOAD_URL, UrlInputs
from execd.wire.x509_delegation import CMD_X509, DelegationError, receive_proxy, write_proxy

FILETRANS_UPLOAD = 61000
FILETRANS_DOWNLOAD = 61001
CMD_FINISHED, CMD_FILE, CMD_MKDIR = 0, 1, 6
GO_AHEAD_ALWAYS = 2
MISSING_FILE_MODE = 1 << 24
ZERO_FILE_MARKER = 666
CHUNK_BYTES = 256 * 1024  # HTCondor's AES file buffer: one message per chunk
ALIVE_INTERVAL_S = 300
# Hold codes (condor_utils/condor_holdcodes.h).
HOLD_DOWNLOAD_FILE_ERROR = 12
HOLD_UPLOAD_FILE_ERROR = 13
HOLD_INVALID_TRANSFER_ACK = 11
HOLD_INVALID_GO_AHEAD = 18


class FileTransferError(RemoteProtocolError):
    """The peer spoke something this side does not implement (URLs, per-file crypto)."""


@dataclass
class TransferResult:
    """What a transfer did; `hold_code` != 0 means the job must go on hold."""

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    hold_code: int = 0
    hold_subcode: int = 0
    hold_reason: str = ""
    failures: int = 0  # files that could not be sent (the first one's reason: hold_reason)
    url_files: int = 0  # of `files`, fetched by a plugin (not CEDAR's in TransferStats)
    try_again: bool = False  # not the job's fault (a plugin could not be run): ack Result 1

    @property
    def ok(self) -> bool:
        return self.hold_code == 0

    def fail(self, code: int, subcode: int, reason: str) -> None:
        if self.ok:  # the first error is the one reported
            self.hold_code, self.hold_subcode, self.hold_reason = code, subcode, reason


@dataclass
class TransferTally:
    """The bytes one job's transfers moved (input received, output sent), told to
    `report` once, at the job's end: condor_starter's final update to its startd
    carries them as BytesRecvd/BytesSent, which the startd sums for its daemon ad."""

    received: int = 0
    sent: int = 0
    report: Callable[[int, int], None] | None = None

    def final(self) -> None:
        if self.report is not None:
            self.report(self.received, self.sent)
            self.report = None


def _stats(result: TransferResult) -> str:
    return (f'[ Protocols = "cedar"; CedarSizeBytes = {result.bytes}; '
            f"CedarFilesCount = {len(result.files) - result.url_files} ]")  # fmt: skip


def ack_ad(result: TransferResult, sender: str = "") -> WireAd:
    """Our ack; an uploader's failure says who failed to send (`sender`: ...)."""
    ad = {"Result": "0" if result.ok else "1" if result.try_again else "-1"}
    if not result.ok:
        reason = f"{sender}: {result.hold_reason}" if sender else result.hold_reason
        ad.update(from_values({"HoldReasonCode": result.hold_code,
                               "HoldReasonSubCode": result.hold_subcode,
                               "HoldReason": reason}))  # fmt: skip
    ad["TransferStats"] = _stats(result)
    return ad


async def _recv_int(ch: MessageChannel, what: str) -> int:
    dec = ch.decoder(await ch.recv())
    value = dec.get_int(what)
    dec.finish(f"{what} message")
    return value


async def send_int(ch: MessageChannel, value: int) -> None:
    await ch.send(ch.encoder().put_int(value).payload())


async def recv_ad(ch: MessageChannel, what: str) -> dict[str, object]:
    dec = ch.decoder(await ch.recv())
    ad = to_classad(decode_ad(dec, what))
    dec.finish(f"{what} message")
    return {k: ad.get(k) for k in ad}


def peer_name(ch: MessageChannel) -> str:
    """`<ip:port>` of the peer, as HTCondor names it in transfer errors."""
    address = getattr(ch, "peer_address", None)
    return f"<{address[0]}:{address[1]}>" if address else "<peer>"


def peer_failure(ad: dict[str, object], result: TransferResult, default_code: int,
                  suffix: str = "") -> None:  # fmt: skip
    code = ad.get("HoldReasonCode")
    sub = ad.get("HoldReasonSubCode")
    reason = str(ad.get("HoldReason") or "peer failed") + suffix
    result.fail(code if isinstance(code, int) and code else default_code,
                sub if isinstance(sub, int) else 0, reason)  # fmt: skip


async def go_ahead(ch: MessageChannel, *, downloading: bool) -> None:
    """The GoAhead exchange before the first file (no transfer queue: always go ahead)."""

    async def send_ours() -> None:
        await _recv_int(ch, "peer's alive interval")
        ours = {"Result": str(GO_AHEAD_ALWAYS)}
        if downloading:
            ours["MaxTransferBytes"] = "-1"
        await ch.send(encode_ad(ch.encoder(), ours).payload())

    async def receive_theirs() -> None:
        await send_int(ch, ALIVE_INTERVAL_S)
        while True:
            theirs = await recv_ad(ch, "GoAhead ad")
            go = theirs.get("Result")
            if not isinstance(go, int):
                raise RemoteProtocolError("GoAhead ad without an integer Result")
            if go != 0:  # 0: still waiting for a transfer queue slot
                break
        if go < 0:
            raise RemoteProtocolError(f"peer refused the transfer: {theirs.get('HoldReason')}")

    if downloading:
        await send_ours()
        await receive_theirs()
    else:
        await receive_theirs()
        await send_ours()


def _sandbox_path(sandbox: Path, name: str) -> Path | None:
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or ".." in parts:
        return None
    return sandbox.joinpath(*parts)


async def _file_size(ch: MessageChannel) -> int:
    """The size message before a file's chunks (ReliSock::put_file)."""
    dec = ch.decoder(await ch.recv())
    size = dec.get_int("file size")
    dec.get_int("chunk size")
    dec.finish("file size message")
    if size < 0:
        raise RemoteProtocolError(f"file size {size} is negative")
    return size


async def receive_small_file(ch: MessageChannel, limit: int) -> bytes | None:
    """One file sent by ReliSock::put_file, kept in memory; None when its size header
    says more than `limit` bytes: then nothing more is read (a peer announcing 2**63
    bytes would otherwise keep us receiving for ever), and the caller answers and ends
    the connection, its chunks unread."""
    size = await _file_size(ch)
    if size > limit:
        return None
    chunks: list[bytes] = []
    got = 0
    while got < size:
        chunk = await ch.recv()
        if not chunk or got + len(chunk) > size:
            raise RemoteProtocolError(f"file chunk of {len(chunk)} bytes at {got} of {size}")
        got += len(chunk)
        chunks.append(chunk)
    if size == 0 and await _recv_int(ch, "zero-length file marker") != ZERO_FILE_MARKER:
        raise RemoteProtocolError("zero-length file without its 666 marker")
    return b"".join(chunks)


async def _receive_file_bytes(ch: MessageChannel, target: Path | None, mode: int = 0o600,
                              owner: tuple[int, int] | None = None) -> tuple[int, int]:  # fmt: skip
    """(bytes, errno) of one file's size/chunks/marker; target None: consume only. The
    file gets `mode` and, given one, `owner` through its fd once written: it is the
    job's user's before anything of the user's can run, never a setuid file of root's."""
    size = await _file_size(ch)
    error = 0
    fd = -1
    if target is not None:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            error = exc.errno or errnos.EIO
    got = 0
    try:
        while got < size:
            chunk = await ch.recv()
            if not chunk or got + len(chunk) > size:
                raise RemoteProtocolError(f"file chunk of {len(chunk)} bytes at {got} of {size}")
            got += len(chunk)
            if fd >= 0:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    error = exc.errno or errnos.EIO
                    os.close(fd)
                    fd = -1
        if size == 0 and await _recv_int(ch, "zero-length file marker") != ZERO_FILE_MARKER:
            raise RemoteProtocolError("zero-length file without its 666 marker")
        if fd >= 0:
            try:
                if owner is not None:
                    os.fchown(fd, *owner)
                os.fchmod(fd, mode & 0o777)  # never setuid, setgid or sticky from the wire
            except OSError as exc:
                error = exc.errno or errnos.EIO
    finally:
        if fd >= 0:
            os.close(fd)
    return got, error


async def _receive_delegated_proxy(ch: MessageChannel, name: str, target: Path | None,
                                   result: TransferResult,
                                   owner: tuple[int, int] | None) -> None:  # fmt: skip
    """Command 4: the job's proxy, delegated (no mode, no size; not counted as a CEDAR
    file or its bytes, as HTCondor's stats do not)."""
    try:
        text = await receive_proxy(ch)
    except DelegationError as exc:
        result.fail(HOLD_DOWNLOAD_FILE_ERROR, 0, f"receiving file {name}: X509 proxy "
                    f"delegation failed: {exc}")  # fmt: skip
        return
    if target is None:
        return
    try:
        write_proxy(target, text, owner)
    except OSError as exc:
        error = exc.errno or errnos.EIO
        result.fail(HOLD_DOWNLOAD_FILE_ERROR, error,
                    f"writing to file {name}: (errno {error}) {os.strerror(error)}")


async def _receive_url(ch: MessageChannel, name: str, target: Path | None,
                       urls: UrlInputs | None, result: TransferResult) -> None:  # fmt: skip
    """Command 5: the URL (its own message), deferred to its plugin's run; one that
    cannot be fetched here fails as condor_starter's DoDownload words a file it could
    not receive: `STARTER at <our ip> - |Error: receiving file <path>: <errors>`."""
    dec = ch.decoder(await ch.recv())
    url = dec.get_string("URL")
    dec.finish("URL message")
    if target is None:
        return
    failed = urls.add(name, url, target) if urls is not None else (0, (
        "FILETRANSFER:1:URL transfers are not supported here.  Cannot transfer URL file = "
        f"{url_safe(url)} ."))  # fmt: skip
    if failed is not None:
        result.fail(HOLD_DOWNLOAD_FILE_ERROR, failed[0],
                    f"{_starter_at(ch)}receiving file {target}: {failed[1]}")


def _starter_at(ch: MessageChannel) -> str:
    address = getattr(ch, "local_address", None)
    return f"STARTER at {address[0] if address else '127.0.0.1'} - |Error: "


def _make_dir(target: Path, mode: int, owner: tuple[int, int] | None) -> None:
    """A directory the shadow sends (one already there is kept), the owner's, never
    one reached through a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(target, (mode & 0o777) or 0o700)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


async def download_sandbox(ch: MessageChannel, sandbox: Path, *,
                           executable: str | None = None,
                           urls: UrlInputs | None = None,
                           owner: tuple[int, int] | None = None) -> TransferResult:  # fmt: skip
    """Receive the input sandbox the shadow uploads (after FILETRANS_UPLOAD + key);
    its URLs are fetched by `urls` once the other items are in. Given `owner`, each
    file, directory and the proxy is that user's (fchown) as it is made, modes masked
    to 0o777, as condor_starter receives as the job's user."""
    result = TransferResult()
    dec = ch.decoder(await ch.recv())
    dec.get_int("final transfer flag")
    decode_ad(dec, "transfer info ad")
    dec.finish("transfer header")
    first = True
    while (command := await _recv_int(ch, "file command")) != CMD_FINISHED:
        if command not in (CMD_FILE, CMD_MKDIR, CMD_X509, CMD_DOWNLOAD_URL):
            raise FileTransferError(f"file transfer command {command} is not supported by "
                                    "execd (only CEDAR files, directories, X509 proxies "
                                    "and URLs)")  # fmt: skip
        dec = ch.decoder(await ch.recv())
        name = dec.get_string("file name")
        dec.finish("file name message")
        if first:
            await go_ahead(ch, downloading=True)
            first = False
        target = _sandbox_path(sandbox, name)
        if target is None:
            result.fail(HOLD_DOWNLOAD_FILE_ERROR, errnos.EPERM,
                        f"Attempt to write to illegal sandbox path: {name}")  # fmt: skip
        if command == CMD_X509:
            await _receive_delegated_proxy(ch, name, target, result, owner)
            continue
        if command == CMD_DOWNLOAD_URL:
            await _receive_url(ch, name, target, urls, result)
            continue
        mode = await _recv_int(ch, "file mode")
        if command == CMD_MKDIR:
            if target is not None:
                try:
                    _make_dir(target, mode, owner)
                except OSError as exc:
                    result.fail(HOLD_DOWNLOAD_FILE_ERROR, exc.errno or errnos.EIO,
                                f"failed to create directory {name}: {exc.strerror}")  # fmt: skip
            continue
        if mode == MISSING_FILE_MODE:
            target = None
        exec_name = executable and os.path.basename(executable)
        size, error = await _receive_file_bytes(
            ch, target, 0o755 if name == exec_name else (mode & 0o777) or 0o600, owner)
        if error:
            why = f"writing to file {name}: (errno {error}) {os.strerror(error)}"
            result.fail(HOLD_DOWNLOAD_FILE_ERROR, error, why)
        elif target is not None:
            result.files.append(name)
            result.bytes += size
    if result.ok and urls is not None:  # the deferred URLs, before the uploader's ack
        fetched, failure = await urls.fetch(_starter_at(ch))
        result.files += fetched
        result.url_files = len(fetched)
        if failure is not None:
            result.fail(*failure)
            # condor_starter: "not our fault, try again elsewhere"
            result.try_again = failure[1] == SUBCODE_EXEC_FAILED
    peer = await recv_ad(ch, "uploader's ack")
    if peer.get("Result") != 0:
        peer_failure(peer, result, HOLD_UPLOAD_FILE_ERROR,
                      f"; STARTER failed to receive file(s) from {peer_name(ch)}")
    await ch.send(encode_ad(ch.encoder(), ack_ad(result)).payload())
    return result
