"""The output listing and upload stay within their bounds whatever the job leaves
(execd/wire/output_files.py, sandbox_upload.py, owner_thread.py): entries still waiting
to be listed count toward MAX_OUTPUT_ITEMS, the names held are within MAX_NAME_BYTES,
a path past PATH_MAX stops the listing, a file deep in a tree costs no path resolution
per level, a hung file system holds the job after the I/O time limit instead of
stalling the upload, a descriptor is never closed under its read nor leaked by a late
cancellation, ids of 2**31 and more are taken, and an unexpected error in the upload's
thread fails its calls instead of leaving them waiting forever."""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_output_files import Shadow

from execd.wire import output_files
from execd.wire.filetransfer import TransferResult
from execd.wire.output_files import PATH_MAX, OutputListError, expand_outputs
from execd.wire.owner_thread import OwnerThread, OwnerThreadTimeoutError, file_access_ids
from execd.wire.sandbox_upload import _send_file, upload_sandbox

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="changing file-access ids needs root")


@pytest.fixture
def box() -> Iterator[Path]:
    """A sandbox the job's user (nobody) owns, on a path that user can walk."""
    tmp = tempfile.mkdtemp(prefix="execd-test-")
    os.chmod(tmp, 0o755)
    sandbox = Path(tmp) / "dir_1"
    sandbox.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(sandbox, NOBODY, NOBODY)
    yield sandbox
    shutil.rmtree(tmp)


def upload(sandbox: Path, names: list[str]) -> tuple[Shadow, TransferResult]:
    shadow = Shadow()
    result = asyncio.run(upload_sandbox(shadow, sandbox, lambda: expand_outputs(sandbox, names)))
    return shadow, result


def test_entries_waiting_to_be_listed_count_toward_the_item_bound(
        box: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # Each level queued its entries while only the items made were counted: 14 levels
    # of 50,000 links each held 1.6 GB before the bound was reached.
    monkeypatch.setattr(output_files, "MAX_OUTPUT_ITEMS", 10)
    for d in range(8):
        (box / "t" / f"d{d}").mkdir(parents=True)
        for f in range(8):
            (box / "t" / f"d{d}" / f"f{f}").write_text("")
    held: list[int] = []
    add = output_files._Expansion.add

    def counted(self: output_files._Expansion, *args: object, **kwargs: object) -> object:
        held.append(len(self.items) + len(getattr(self, "pending", ())))
        return add(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(output_files._Expansion, "add", counted)
    with pytest.raises(OutputListError) as raised:
        expand_outputs(box, ["t"])
    assert raised.value.errno == errno.E2BIG
    # past the bound when t/d0 was listed (its 8 and t's 7 others waiting), not later
    assert str(raised.value).endswith(f"more than 10 output files and directories (in {box}/t/d0)")
    assert max(held) <= 10  # items made and entries queued, together


def test_the_names_held_are_bounded_and_the_hold_says_so(
        box: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(output_files, "MAX_NAME_BYTES", 4000)
    (box / "t").mkdir()
    for i in range(20):  # 20 names of 200 bytes, each held as source and as name
        (box / "t" / f"{i:03d}{'x' * 197}").write_text("")
    shadow, result = upload(box, ["t"])
    assert shadow.items() == []
    assert (result.hold_code, result.hold_subcode) == (13, errno.E2BIG)
    assert "the output's file names take more than 4000 bytes" in result.hold_reason


def test_a_path_longer_than_path_max_stops_the_listing(box: Path) -> None:
    # a directory whose entries' paths pass PATH_MAX: not one item per entry, each with
    # a path-sized name and a failure, but a hold at the listing
    fd = os.open(box, os.O_RDONLY)
    try:
        levels = 0
        while len(str(box)) + 251 * (levels + 1) < PATH_MAX - 10:  # a path can be made
            os.mkdir("n" * 250, dir_fd=fd)
            deeper = os.open("n" * 250, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd, levels = deeper, levels + 1
        for i in range(50):
            os.close(os.open(f"{i:03d}{'f' * 200}", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    shadow, result = upload(box, ["n" * 250])
    assert shadow.items() == []
    assert (result.hold_code, result.hold_subcode) == (13, errno.ENAMETOOLONG)
    assert f"a path longer than {PATH_MAX} bytes" in result.hold_reason
    assert "total failures" not in result.hold_reason


def test_failures_are_counted_and_only_the_first_reason_kept(box: Path) -> None:
    # (a path-sized reason per failed file was kept, only the first ever used)
    shadow, result = upload(box, [f"nothere{i}" for i in range(3)])
    assert [name for _, name, _ in shadow.items()] == ["nothere0", "nothere1", "nothere2"]
    assert result.failures == 3 and not hasattr(result, "failed")
    assert result.hold_reason.endswith(
        f"|Error: 3 total failures: first failure: reading from file {box}/nothere0: "
        "(errno 2) No such file or directory")  # fmt: skip


def test_a_deep_file_costs_no_path_resolution_per_item(
        box: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    # realpath lstats every level of a path: per item, 5,000 files 998 levels down
    # took 80 s. Entries of a directory inside the sandbox are inside unless links.
    deepest = box
    for _ in range(20):
        deepest = deepest / "d"
        deepest.mkdir()
    for i in range(30):
        (deepest / f"f{i}").write_text(f"{i}\n")
    (deepest / "link").symlink_to("f0")  # a link is still resolved (in the sandbox)
    resolved: list[str] = []
    realpath = os.path.realpath

    def counting(path: str, *args: object, **kwargs: object) -> str:
        resolved.append(str(path))
        return realpath(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os.path, "realpath", counting)
    shadow, result = upload(box, ["d"])
    assert result.ok and len(shadow.items()) == 20 + 31
    assert ("/".join(["d"] * 20) + "/link", 0o644) in [(n, m) for _, n, m in shadow.items()]
    # the sandbox once, the link twice (listing, opening): nothing per plain file
    assert len(resolved) <= 3, resolved


def test_a_hung_listing_holds_the_job_after_the_time_limit(box: Path) -> None:
    hung, finish = threading.Event(), threading.Event()

    def stuck() -> list[object]:  # as a readdir on a FUSE mount nobody serves
        hung.set()
        finish.wait(30)
        return []

    shadow = Shadow()
    try:
        result = asyncio.run(upload_sandbox(shadow, box, stuck, io_timeout_s=0.2))  # type: ignore[arg-type]
    finally:
        finish.set()
    assert hung.is_set() and shadow.items() == []
    assert (result.hold_code, result.hold_subcode) == (13, errno.ETIMEDOUT)
    assert "no answer from the job's file system within 0.2 s" in result.hold_reason


def test_calls_after_a_timeout_fail_at_once() -> None:
    finish = threading.Event()

    async def calls() -> tuple[int, int]:
        worker = OwnerThread((os.geteuid(), os.getegid()), timeout_s=0.2)
        with pytest.raises(OwnerThreadTimeoutError) as first:
            await worker.call(finish.wait, 30)
        with pytest.raises(OwnerThreadTimeoutError) as later:  # not another 0.2 s each
            await asyncio.wait_for(worker.call(int, "1"), 0.05)
        worker.close()
        return first.value.errno or 0, later.value.errno or 0

    try:
        assert asyncio.run(calls()) == (errno.ETIMEDOUT, errno.ETIMEDOUT)
    finally:
        finish.set()


def test_a_cancelled_upload_closes_its_descriptor_behind_the_read() -> None:
    # the read is queued on the upload's thread (behind a slow call); the cancelled
    # upload must not close the descriptor on the loop's thread meanwhile: the number
    # could be reused (another shadow's socket) and then read by the thread
    busy, finish = threading.Event(), threading.Event()
    read, write = os.pipe()
    os.write(write, b"0123456789")

    def slow() -> None:
        busy.set()
        finish.wait(10)

    async def cancelled() -> tuple[bool, bool]:
        worker = OwnerThread((os.geteuid(), os.getegid()))
        blocker = asyncio.ensure_future(worker.call(slow))
        await asyncio.to_thread(busy.wait, 10)
        task = asyncio.ensure_future(_send_file(Shadow(), (read, 0o644, 10), worker))  # type: ignore[arg-type]
        for _ in range(5):  # the fake shadow's sends never wait: the read's call is queued
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.wait([task])
        open_meanwhile = _is_open(read)
        finish.set()
        await blocker
        await worker.call(int, "0")  # after the close queued behind the read
        worker.close()
        return open_meanwhile, _is_open(read)

    try:
        assert asyncio.run(cancelled()) == (True, False)
    finally:
        os.close(write)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_a_result_that_came_before_the_cancellation_is_discarded() -> None:
    done = threading.Event()

    async def late() -> list[int]:
        worker = OwnerThread((os.geteuid(), os.getegid()))
        discarded: list[int] = []
        call = asyncio.ensure_future(worker.call(os.open, os.devnull, os.O_RDONLY,
                                                 discard=discarded.append))  # fmt: skip
        after = asyncio.ensure_future(worker.call(done.set))  # queued behind the open
        await asyncio.sleep(0)  # both calls queued
        done.wait(10)  # on the loop's thread: the open's result is on its way to it
        asyncio.get_running_loop().call_soon(call.cancel)  # after the result, before `call` resumes
        await after
        with pytest.raises(asyncio.CancelledError):
            await call
        worker.close()
        return discarded

    fds = asyncio.run(late())
    assert len(fds) == 1  # handed to discard, not lost
    os.close(fds[0])


@root_only
def test_ids_of_two_to_the_31_and_more_are_taken() -> None:
    big = (2**31 + 5, 2**31 + 7)

    async def ids() -> tuple[int, int]:
        worker = OwnerThread(big)
        try:
            return await worker.call(file_access_ids)
        finally:
            worker.close()

    assert asyncio.run(ids()) == big


def test_an_unexpected_error_in_the_thread_fails_later_calls() -> None:
    # a discard that raises after the caller's loop closed killed the thread before:
    # every later call waited forever
    started, finish = threading.Event(), threading.Event()
    worker = OwnerThread((os.geteuid(), os.getegid()))

    def slow() -> int:
        started.set()
        finish.wait(10)
        return 1

    def broken(value: int) -> None:
        raise ValueError("a discard of ours that fails")

    async def left() -> None:
        call = asyncio.ensure_future(worker.call(slow, discard=broken))
        await asyncio.to_thread(started.wait, 10)  # asyncio.run then cancels the call
        assert not call.done()

    asyncio.run(left())
    finish.set()  # its result reaches a closed loop: discard raises in the thread

    async def later() -> int:
        return await asyncio.wait_for(worker.call(int, "2"), 10)

    with pytest.raises(OSError, match="the upload's thread failed: ValueError") as raised:
        asyncio.run(later())
    assert raised.value.errno == errno.EIO
    worker.close()
