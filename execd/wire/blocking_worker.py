"""One daemon thread for blocking file work the event loop must not wait on.

asyncio's executors are ThreadPoolExecutors, whose threads the interpreter joins at
exit: a call stuck in the kernel (a read on a hung NFS or FUSE mount) would then hold
the daemon's own end. This worker's thread is a daemon thread, never joined; its calls
run one at a time, in order. `run` awaits a call with a time limit, and a call still
queued when its caller stops waiting is skipped; `submit` hands back a future the thread
settles when the call returns, however long that takes (no limit: a call is skipped only
if that future is cancelled while it waits in the queue).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
Work = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[..., Any], tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # its caller gave up (timed out, cancelled)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class BlockingWorker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[Work] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()

    async def run(self, timeout_s: float, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` on the thread; TimeoutError after `timeout_s`."""
        return await asyncio.wait_for(self.submit(work, *args), timeout_s)

    def submit(self, work: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """`work(*args)` queued on the thread; its future is settled by the thread once
        the call has returned (never skipped unless the future is cancelled)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._start:
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self.name,
                                                daemon=True)  # fmt: skip
                self._thread.start()
        self._queue.put((loop, future, work, args))
        return future

    def _serve(self) -> None:
        while True:
            loop, future, work, args = self._queue.get()
            if future.done():
                continue
            result, error = None, None
            try:
                result = work(*args)
            except Exception as exc:  # handed to the caller, whatever it is
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # its loop is closed: nobody waits
                continue
