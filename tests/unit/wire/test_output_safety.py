"""What a job can put in its output cannot reach the root daemon (execd/wire/output_files.py,
execd/wire/owner_thread.py, execd/wire/filetransfer.py's upload): a tty named as an
output is sent as an empty file and never becomes the daemon's controlling terminal; the
listing and the opens run with the job user's file-access ids (other threads keep
root's), so a directory the user cannot list sends only its mkdir and a file the user
cannot read fails; a file swapped after the listing is not sent; a tree deeper than
MAX_DEPTH or a listing over MAX_OUTPUT_ITEMS holds the job instead of crashing or
stalling the daemon; a cancelled upload never waits for its thread and leaks nothing."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_output_files import Shadow

from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.encoding import Decoder
from execd.wire.filetransfer import TransferResult
from execd.wire.output_files import MAX_DEPTH, MAX_OUTPUT_ITEMS, expand_outputs, output_items
from execd.wire.owner_thread import OwnerThread, file_access_ids
from execd.wire.sandbox_upload import upload_sandbox
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_end import remove_sandbox, send_output

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="changing file-access ids needs root")


@pytest.fixture
def box() -> Iterator[Path]:
    """A sandbox the job's user (nobody) owns, on a path that user can walk (pytest's
    tmp_path is root's alone, 0700)."""
    tmp = tempfile.mkdtemp(prefix="execd-test-")
    os.chmod(tmp, 0o755)
    sandbox = Path(tmp) / "dir_1"
    sandbox.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(sandbox, NOBODY, NOBODY)
    yield sandbox
    # as the daemon removes a sandbox (shutil.rmtree recurses per level before 3.12)
    asyncio.run(remove_sandbox(Path(tmp), ShadowOptions(), handed_over=False))
    assert not os.path.exists(tmp)


def owned(path: Path, mode: int) -> Path:
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    return path


def upload(sandbox: Path, names: list[str]) -> tuple[Shadow, TransferResult]:
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(shadow, sandbox, lambda: expand_outputs(sandbox, names)))
    return shadow, result


def test_a_tty_is_sent_empty_and_never_becomes_the_daemons_terminal(box: Path) -> None:
    # The daemon under systemd is a session leader without a terminal: opening a tty
    # without O_NOCTTY would make it its controlling terminal (the job, at the other
    # end, could then send it SIGINT). A child in a session of its own does the upload.
    master, slave = os.openpty()
    tty = os.ttyname(slave)
    if os.geteuid() == 0:
        os.chown(tty, NOBODY, NOBODY)  # the job's own terminal (made by `script`, say)
    mode = stat.S_IMODE(os.stat(tty).st_mode)
    os.close(slave)
    (box / "term").symlink_to(tty)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: setsid, the upload, then whether it has a terminal now
        code = 3
        try:
            os.setsid()
            shadow, result = upload(box, ["term"])
            try:
                os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY))
                code = 1  # it has a controlling terminal
            except OSError:
                code = 0
            os.write(write, repr((shadow.items(), result.ok, result.bytes)).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        sent = pipe.read()
    _, status = os.waitpid(pid, 0)
    os.close(master)
    assert os.waitstatus_to_exitcode(status) == 0, "the upload took the tty as its terminal"
    assert sent == repr(([(1, "term", mode)], True, 0))  # as put_file: empty, its mode


@root_only
def test_files_are_listed_and_opened_with_the_users_rights(box: Path) -> None:
    outside = box.parent / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (outside / "secret.txt").chmod(0o600)  # root's
    (box / "mine.txt").write_text("mine\n")
    owned(box / "mine.txt", 0o644)
    (box / "locked").mkdir()
    (box / "locked/x").write_text("x\n")
    owned(box / "locked", 0o000)  # root could list it; its user cannot
    (box / "secret").symlink_to(outside / "secret.txt")
    shadow, result = upload(box, ["mine.txt", "locked", "secret"])
    assert shadow.items() == [(1, "mine.txt", 0o644), (6, "locked", 0),
                              (1, "secret", 0o600)]  # fmt: skip
    assert (result.hold_code, result.hold_subcode) == (13, errno.EACCES)
    assert f"reading from file {box}/secret: (errno 13)" in result.hold_reason


@root_only
def test_a_sandbox_its_user_cannot_list_has_no_changed_files(box: Path) -> None:
    # the job took its own rights away (chmod 000 .): as condor_starter's Directory,
    # nothing is listed, and the std files cannot be read (the listing raised before)
    (box / "made.txt").write_text("made\n")
    box.chmod(0o000)
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(
        shadow, box, lambda: output_items(box, {"Out": "out.txt"}, [], {})))
    assert shadow.items() == [(1, "_condor_stdout", 1 << 24)]
    assert (result.hold_code, result.hold_subcode) == (13, errno.EACCES)


@root_only
def test_only_the_owner_thread_has_the_users_ids() -> None:
    # its groups: the job's primary group alone, as shadow_job runs the job
    started, finish = threading.Event(), threading.Event()
    ours = os.getgroups()

    def held() -> tuple[tuple[int, int], list[int]]:
        started.set()
        finish.wait(10)
        return file_access_ids(), os.getgroups()

    async def meanwhile() -> tuple[object, ...]:
        worker = OwnerThread((NOBODY, NOBODY))
        try:
            ids = asyncio.ensure_future(worker.call(held))
            await asyncio.to_thread(started.wait, 10)
            main, other = file_access_ids(), await asyncio.to_thread(file_access_ids)
            groups = os.getgroups()
            finish.set()
            return await ids, main, other, groups
        finally:
            worker.close()

    assert asyncio.run(meanwhile()) == (((NOBODY, NOBODY), [NOBODY]), (0, 0), (0, 0), ours)


def test_a_file_swapped_after_the_listing_is_not_sent(box: Path) -> None:
    (box / "out.txt").write_text("listed\n")
    owned(box / "out.txt", 0o644)
    items = expand_outputs(box, ["out.txt"])
    (box / "other.txt").write_text("swapped in\n")
    owned(box / "other.txt", 0o644)
    (box / "other.txt").rename(box / "out.txt")
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(shadow, box, lambda: items))
    assert (result.hold_code, result.hold_subcode) == (13, errno.ESTALE)
    assert b"swapped in" not in b"".join(shadow.sent)


def nested(sandbox: Path, levels: int) -> str:
    """`levels` directories one in the other, a file at the bottom; the top's name."""
    deepest = str(sandbox)
    for _ in range(levels):  # os.makedirs (and shutil.rmtree before 3.12) recurse
        deepest += "/d"
        os.mkdir(deepest)
    Path(deepest, "f.txt").write_text("bottom\n")
    return "d"


def test_a_deep_tree_is_sent_whole(box: Path) -> None:
    shadow, result = upload(box, [nested(box, MAX_DEPTH - 1)])
    items = shadow.items()
    assert result.ok and len(items) == MAX_DEPTH
    assert items[-1] == (1, "/".join(["d"] * (MAX_DEPTH - 1) + ["f.txt"]),
                         items[-1][2])  # fmt: skip


def test_a_tree_deeper_than_the_limit_holds_the_job(box: Path) -> None:
    shadow, result = upload(box, [nested(box, MAX_DEPTH + 100)])
    assert shadow.items() == []  # nothing sent, the ack says why
    assert (result.hold_code, result.hold_subcode) == (13, errno.ENAMETOOLONG)
    assert f"deeper than {MAX_DEPTH} levels" in result.hold_reason
    ack = to_classad(decode_ad(Decoder(shadow.sent[-1], encrypted=True)))
    assert ack["Result"] == -1 and ack["HoldReasonCode"] == 13


def test_a_directory_over_the_item_limit_holds_the_job(box: Path) -> None:
    many = box / "many"
    many.mkdir()
    for i in range(MAX_OUTPUT_ITEMS + 1):
        os.close(os.open(many / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    shadow, result = upload(box, ["many"])
    assert shadow.items() == []
    assert (result.hold_code, result.hold_subcode) == (13, errno.E2BIG)
    assert f"more than {MAX_OUTPUT_ITEMS} output files" in result.hold_reason
    # without transfer_output_files the sandbox itself is listed within the same bound
    for i in range(MAX_OUTPUT_ITEMS + 1):
        (many / f"f{i}").rename(box / f"f{i}")
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(shadow, box, lambda: output_items(box, {}, [], {})))
    assert (result.hold_code, result.hold_subcode) == (13, errno.E2BIG)


def test_a_cancelled_upload_never_waits_for_its_thread(box: Path) -> None:
    listing, finish = threading.Event(), threading.Event()

    def stuck() -> list[object]:  # as a listing on a hung file system
        listing.set()
        finish.wait(10)
        return []

    async def cancelled() -> bool:
        task = asyncio.ensure_future(upload_sandbox(Shadow(), box, stuck))  # type: ignore[arg-type]
        await asyncio.to_thread(listing.wait, 10)
        task.cancel()
        await asyncio.wait([task], timeout=5)
        return task.cancelled() and not finish.is_set()

    try:
        assert asyncio.run(cancelled())
    finally:
        finish.set()


def test_a_descriptor_opened_after_its_caller_left_is_discarded() -> None:
    opening, finish = threading.Event(), threading.Event()

    def slow_open() -> int:
        opening.set()
        finish.wait(10)
        return os.open(os.devnull, os.O_RDONLY)

    async def left() -> int:
        worker = OwnerThread((0, 0))
        closed: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def discard(fd: int) -> None:
            os.close(fd)
            closed.set_result(fd)

        call = asyncio.ensure_future(worker.call(slow_open, discard=discard))
        await asyncio.to_thread(opening.wait, 10)
        call.cancel()
        worker.close()
        finish.set()
        return await asyncio.wait_for(closed, 10)

    assert asyncio.run(left()) >= 0  # handed to discard, which closed it


class FailingTransfers:
    """The output transfer as far as send_output sees it, failing as a bug of ours would."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def run(self, command: int, work: object) -> TransferResult:
        raise self.error


def test_an_error_of_ours_in_the_output_transfer_holds_the_job() -> None:
    # (a RecursionError escaped conclude before: no job_exit, no hold, the job lost)
    broken = FailingTransfers(RecursionError("maximum recursion depth exceeded"))
    result = asyncio.run(send_output(broken, upload_sandbox, "host#1.0#1"))  # type: ignore[arg-type]
    assert (result.hold_code, result.hold_subcode) == (13, errno.EIO)
    assert result.hold_reason == ("STARTER failed to send the output: RecursionError: "
                                  "maximum recursion depth exceeded")  # fmt: skip
    gone = FailingTransfers(RemoteProtocolError("the shadow closed the connection"))
    with pytest.raises(RemoteProtocolError):  # the shadow's going away is not a hold
        asyncio.run(send_output(gone, upload_sandbox, "host#1.0#1"))  # type: ignore[arg-type]
