"""The bytes Chirp's file calls may hold in memory: across the daemon and per job.

A read, pread, readlink or getfile asks the shadow for up to FILE_MAX bytes, and a
write, pwrite or putfile reads as many from the job; each answer then waits for the
client to read it. Every request takes its bytes from two budgets before it reads
the client's bytes or asks the shadow: its job's (one FILE_MAX in flight) and the
daemon's (DAEMON_BYTES, shared by every job's proxy), and gives them back once its
answer has been written out (or its connection closed). A request that finds either
spent is answered -5 (too big), as a length over FILE_MAX is; the client may try
again later.
"""

from __future__ import annotations

DAEMON_BYTES = 64 * 1024 * 1024


class ByteBudget:
    """A count of bytes that may be held at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, count: int) -> bool:
        if self.used + count > self.limit:
            return False
        self.used += count
        return True

    def give(self, count: int) -> None:
        self.used -= count


DAEMON = ByteBudget(DAEMON_BYTES)


class BufferHold:
    """What one request holds of its job's budget and the daemon's until released."""

    def __init__(self, job: ByteBudget, daemon: ByteBudget = DAEMON) -> None:
        self.job = job
        self.daemon = daemon
        self.held = 0

    def take(self, count: int) -> bool:
        """Hold `count` more bytes; False (nothing taken) where a budget is spent."""
        if not self.job.take(count):
            return False
        if not self.daemon.take(count):
            self.job.give(count)
            return False
        self.held += count
        return True

    def release(self) -> None:
        self.job.give(self.held)
        self.daemon.give(self.held)
        self.held = 0
