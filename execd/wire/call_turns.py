"""Whose turn it is on a shadow connection, and the quiesce before a restart in place.

The shadow's connection carries one call at a time: a message, then its answer (or,
for putfile, two messages and two answers), under one lock. A restart in place hands
the connection to the next image only between messages (execd.wire.handover), so
before the job conversations are cancelled the daemon quiesces them: the gate closes
(a call made from then on waits before it takes the lock: it goes on in the next image,
or fails as on a lost connection once the connection is handed over and the gate opens
again) and the call under way is let finish, its answer read, for QUIESCE_S at most.
Past that the conversation is cancelled mid-call, as before: the connection is not
handed over and the shadow reconnects to the next image.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

# How long a restart in place waits for a call under way to be answered: an update or
# a stream's write is answered in milliseconds; a Chirp put that waits for the job's
# bytes (up to 20 s) or a shadow that stopped answering is not waited for.
QUIESCE_S = 5.0


class CallTurns:
    """One call at a time on a connection (`lock`), and a gate that stops new calls."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self._open = asyncio.Event()
        self._open.set()
        self._changed = asyncio.Event()  # a turn ended (or changed()) since the quiesce looked

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Hold the connection for one call; waits while the gate is closed (also where
        the lock came free only after it closed: the caller that had queued on it)."""
        while True:
            await self._open.wait()
            await self.lock.acquire()
            if self._open.is_set():
                break
            self.lock.release()
        try:
            yield
        finally:
            self.lock.release()
            self._changed.set()

    @property
    def closed(self) -> bool:
        return not self._open.is_set()

    def changed(self) -> None:
        """What `settled` looks at changed outside a turn's end (the connection given
        up under a call that then waits for a reconnect in its turn; a cancelled call's
        answer read): the quiesce looks again."""
        self._changed.set()

    def reopen(self) -> None:
        """The waiting calls go on (on a connection that is handed over, they fail)."""
        self._open.set()

    async def quiesce(self, settled: Callable[[], bool], timeout_s: float) -> bool:
        """Close the gate and wait until `settled()` (re-checked as each turn ends and
        at each changed()), `timeout_s` at most; whether it is."""
        self._open.clear()
        deadline = time.monotonic() + timeout_s
        while not settled():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._changed.clear()
            waiter = asyncio.ensure_future(self._changed.wait())
            done, _ = await asyncio.wait({waiter}, timeout=left)
            if not done:
                waiter.cancel()
        return True
