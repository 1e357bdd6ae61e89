"""A pidfile that refuses a second daemon: an exclusive lock held for the process's life."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from execd.errors import ExecdError


class AlreadyRunningError(ExecdError):
    """Another execd already holds the pidfile."""


class PidFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunningError(
                f"execd is already running (pid {holder}, pidfile {self.path})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> PidFile:
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()
