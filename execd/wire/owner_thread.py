"""A thread that does one upload's file work (listing the output, opening and reading
its files) with the job user's file-access rights, as condor_starter's transfer runs
as the user: what the job cannot list or read, the transfer cannot either, whatever a
link or a racing process points a path at.

Linux keeps credentials per thread: setfsuid/setfsgid change only the calling thread's
file-access ids, and the raw setgroups system call only its groups (glibc's wrapper
changes every thread's). The thread takes the user's ids once, when it starts, with
the groups the job runs with (its primary group alone: shadow_job starts it with
extra_groups=[]), and gives them back before it ends; the daemon's other threads keep
root's all along. A sandbox root owns (no user's yet: a failed input transfer) is
worked on as root, and a daemon that is not root works on its own sandboxes as itself.

The event loop never waits for the thread: `call` awaits a future the thread settles,
within a time limit (a FUSE server the job left behind can leave an open or a read
unanswered forever: past the limit the call raises OwnerThreadTimeoutError and every later
call at once, and the thread is abandoned), and `close` only asks it to end. Work
finished after its caller went away (a cancelled upload) is handed to `discard` (a
descriptor is closed), never leaked; `post` queues work nobody awaits (a close behind a
read, so a descriptor is never closed under the thread that reads it). An error the
thread does not expect fails every call, queued or later, instead of leaving them
waiting on a thread that is gone.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno as errnos
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from execd.log import get_logger

log = get_logger("wire")
T = TypeVar("T")
# SYS_setgroups by machine (the per-thread system call, not glibc's all-threads wrapper):
# x86_64's own table, and the generic one (asm-generic/unistd.h) of the others
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "riscv64": 159, "loongarch64": 159}
_NO_CHANGE = 0xFFFFFFFF  # setfsuid/setfsgid's (uid_t)-1: report the current id only
_libc: ctypes.CDLL | None = None


def _c_library() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - loaded once, on the first upload
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        for function in (_libc.setfsuid, _libc.setfsgid):
            # uid_t in and out: an id of 2**31 or more read as a C int came back negative
            function.argtypes, function.restype = [ctypes.c_uint], ctypes.c_uint
    return _libc


def _set_groups(groups: list[int]) -> None:
    number = _SYS_SETGROUPS.get(os.uname().machine)
    if number is None:
        raise OSError(errnos.ENOSYS, "execd does not know the setgroups system call's number "
                      f"on this machine's architecture ({os.uname().machine}; it knows "
                      f"{', '.join(_SYS_SETGROUPS)}): files cannot be read as the job's user")
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _c_library().syscall(number, len(groups), array) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setgroups: {os.strerror(code)}")


def file_access_ids() -> tuple[int, int]:
    """The calling thread's (fsuid, fsgid)."""
    libc = _c_library()
    return libc.setfsuid(_NO_CHANGE), libc.setfsgid(_NO_CHANGE)


def take_ids(uid: int, gid: int) -> None:
    """The calling thread's file access becomes the user's (uid, [gid])."""
    _set_groups([gid])
    libc = _c_library()
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    if file_access_ids() != (uid, gid):
        raise OSError(errnos.EPERM, f"could not take the file access ids {uid}:{gid}")


def give_back_ids(groups: list[int]) -> None:
    """The calling thread's file access becomes root's again, or OSError."""
    libc = _c_library()
    libc.setfsuid(0)
    libc.setfsgid(0)
    _set_groups(groups)
    if file_access_ids() != (0, 0):
        raise OSError(errnos.EPERM, "could not give back root's file access ids")


class OwnerThreadTimeoutError(TimeoutError):
    """A call on the thread got no answer within its time limit (a hung file system)."""


@dataclass
class _Work:
    function: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any] | None  # None: posted, nobody awaits it
    loop: asyncio.AbstractEventLoop | None
    discard: Callable[[Any], None] | None


class OwnerThread:
    """One upload's thread with the file-access ids of `owner` (uid, gid)."""

    def __init__(self, owner: tuple[int, int], name: str = "owner-files",
                 timeout_s: float | None = None) -> None:  # fmt: skip
        self.owner = owner
        self.timeout_s = timeout_s
        self._stuck: OwnerThreadTimeoutError | None = None
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def call(self, function: Callable[..., T], *args: Any,
                   discard: Callable[[T], None] | None = None) -> T:  # fmt: skip
        """function(*args) in the thread; `discard` gets a result nobody awaits anymore.
        OwnerThreadTimeoutError past `timeout_s`, and at once for every call after that one."""
        if self._stuck is not None:
            raise self._stuck
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._work.put(_Work(function, args, future, loop, discard))
        try:
            return await asyncio.wait_for(asyncio.shield(future), self.timeout_s)
        except TimeoutError:
            future.cancel()  # its result, if it ever comes, goes to discard
            self._stuck = OwnerThreadTimeoutError(
                errnos.ETIMEDOUT, f"no answer from the job's file system within "
                f"{self.timeout_s:g} s")  # fmt: skip
            raise self._stuck from None
        except asyncio.CancelledError:
            # the result may have come just before the cancellation: not leaked
            if future.done() and not future.cancelled() and future.exception() is None:
                if discard is not None:
                    discard(future.result())
            else:
                future.cancel()
            raise

    def post(self, function: Callable[..., object], *args: Any) -> None:
        """function(*args) in the thread after the work queued before it; not awaited."""
        self._work.put(_Work(function, args, None, None, None))

    def close(self) -> None:
        """Ask the thread to end after the work queued; never waits for it."""
        self._work.put(None)

    def _serve(self) -> None:
        uid, gid = self.owner
        change = uid != os.geteuid()  # root's sandbox, or a daemon run as its owner
        failure: OSError | None = None
        ours: list[int] | None = None
        try:
            ours = os.getgroups()
            if change:
                take_ids(uid, gid)
        except OSError as exc:
            failure = exc
        except Exception as exc:  # every call fails with it, none waits
            failure = _unexpected(exc)
        while True:
            try:
                while (work := self._work.get()) is not None:
                    _run(work, failure)
                break
            except Exception as exc:  # as above, for the calls still to come
                log.exception("owner_thread_failed")
                failure = failure or _unexpected(exc)
        if change and ours is not None:
            try:
                give_back_ids(ours)
            except Exception as exc:  # the thread ends here: nothing else runs with them
                log.error("owner_thread_ids_kept", error=str(exc))


def _unexpected(exc: Exception) -> OSError:
    return OSError(errnos.EIO, f"the upload's thread failed: {type(exc).__name__}: {exc}")


def _run(work: _Work, failure: OSError | None) -> None:
    future = work.future
    if future is None or work.loop is None:  # posted: a close, run whatever failed
        try:
            work.function(*work.args)
        except OSError as exc:
            log.warning("owner_thread_posted_work_failed", error=str(exc))
        return
    if future.cancelled():
        return
    value: Any = None
    error: BaseException | None = failure
    if error is None:
        try:
            value = work.function(*work.args)
        except Exception as exc:  # handed to the awaiting caller
            error = exc
    try:
        work.loop.call_soon_threadsafe(_settle, future, work.discard, value, error)
    except RuntimeError:  # the loop is closed: nobody will take the result
        if error is None and work.discard is not None:
            work.discard(value)


def _settle(future: asyncio.Future[Any], discard: Callable[[Any], None] | None,
            value: Any, error: BaseException | None) -> None:  # fmt: skip
    """On the loop's thread: the result to its caller, or to `discard` if it left."""
    if future.cancelled():
        if error is None and discard is not None:
            discard(value)
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
