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
and `close` only asks it to end. Work finished after its caller went away (a cancelled
upload) is handed to `discard` (a descriptor is closed), never leaked.
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
# SYS_setgroups by machine (the per-thread system call, not glibc's all-threads wrapper)
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}
_libc: ctypes.CDLL | None = None


def _c_library() -> ctypes.CDLL:
    global _libc  # noqa: PLW0603 - loaded once, on the first upload
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _set_groups(groups: list[int]) -> None:
    number = _SYS_SETGROUPS.get(os.uname().machine)
    if number is None:
        raise OSError(errnos.ENOSYS, f"no per-thread setgroups on {os.uname().machine}")
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _c_library().syscall(number, len(groups), array) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setgroups: {os.strerror(code)}")


def file_access_ids() -> tuple[int, int]:
    """The calling thread's (fsuid, fsgid)."""
    libc = _c_library()
    return libc.setfsuid(-1), libc.setfsgid(-1)  # -1: no change, the current value


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


@dataclass
class _Work:
    function: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    discard: Callable[[Any], None] | None


class OwnerThread:
    """One upload's thread with the file-access ids of `owner` (uid, gid)."""

    def __init__(self, owner: tuple[int, int], name: str = "owner-files") -> None:
        self.owner = owner
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def call(self, function: Callable[..., T], *args: Any,
                   discard: Callable[[T], None] | None = None) -> T:  # fmt: skip
        """function(*args) in the thread; `discard` gets a result nobody awaits anymore."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._work.put(_Work(function, args, future, loop, discard))
        return await future

    def close(self) -> None:
        """Ask the thread to end after the work queued; never waits for it."""
        self._work.put(None)

    def _serve(self) -> None:
        uid, gid = self.owner
        ours = os.getgroups()
        failure: OSError | None = None
        change = uid != os.geteuid()  # root's sandbox, or a daemon run as its owner
        if change:
            try:
                take_ids(uid, gid)
            except OSError as exc:
                failure = exc
        while (work := self._work.get()) is not None:
            _run(work, failure)
        if change:
            try:
                give_back_ids(ours)
            except OSError as exc:  # the thread ends here: nothing else runs with them
                log.error("owner_thread_ids_kept", error=str(exc))


def _run(work: _Work, failure: OSError | None) -> None:
    if work.future.cancelled():
        return
    value: Any = None
    error: BaseException | None = failure
    if error is None:
        try:
            value = work.function(*work.args)
        except Exception as exc:  # handed to the awaiting caller
            error = exc
    try:
        work.loop.call_soon_threadsafe(_settle, work, value, error)
    except RuntimeError:  # the loop is closed: nobody will take the result
        if error is None and work.discard is not None:
            work.discard(value)


def _settle(work: _Work, value: Any, error: BaseException | None) -> None:
    """On the loop's thread: the result to its caller, or to `discard` if it left."""
    if work.future.cancelled():
        if error is None and work.discard is not None:
            work.discard(value)
    elif error is not None:
        work.future.set_exception(error)
    else:
        work.future.set_result(value)
