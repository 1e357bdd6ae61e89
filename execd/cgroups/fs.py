"""The one OS seam for cgroup files: every read, write, mkdir and rmdir goes through here.

Component tests replace `CgroupFS` with a recording fake; the system tier uses this real
one against the kernel. Every failure is a CgroupError that names the path.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

from execd.errors import CgroupError


class CgroupFS:
    """Reads and writes cgroup v2 interface files of the real kernel."""

    def read(self, path: Path) -> str:
        try:
            return path.read_text()
        except OSError as exc:
            raise CgroupError(f"cannot read {path}: {exc.strerror}") from exc

    def write(self, path: Path, value: str) -> None:
        # One write(2) per value: the kernel parses each write as one command.
        try:
            fd = os.open(path, os.O_WRONLY)
        except OSError as exc:
            raise CgroupError(f"cannot open {path} for writing: {exc.strerror}") from exc
        try:
            os.write(fd, value.encode())
        except OSError as exc:
            raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc
        finally:
            os.close(fd)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def mkdir(self, path: Path) -> None:
        try:
            path.mkdir()
        except FileExistsError:
            return
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {path}: {exc.strerror}") from exc

    def rmdir(self, path: Path) -> None:
        try:
            path.rmdir()
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                raise CgroupError(f"cannot remove cgroup {path}: it still has processes") from exc
            raise CgroupError(f"cannot remove cgroup {path}: {exc.strerror}") from exc

    def children(self, path: Path) -> list[str]:
        try:
            # scandir's d_type says which entries are directories: no stat per file
            with os.scandir(path) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise CgroupError(f"cannot list cgroup {path}: {exc.strerror}") from exc

    def kill_pid(self, pid: int) -> None:
        """SIGKILL one process; one that already exited is not an error."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError as exc:
            raise CgroupError(f"cannot kill pid {pid}: {exc.strerror}") from exc
