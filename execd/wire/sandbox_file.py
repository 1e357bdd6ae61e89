"""A file the root daemon replaces in a job's sandbox while the job runs (a refreshed
X509 proxy, `.update.ad`): the sandbox opened without following a link and checked to be
the directory recorded at the job's start, still the job user's (never root's); the new
content written to `<name>.tmp` (created O_EXCL|O_NOFOLLOW in that directory, the job
user's, `mode`) and renamed over `<name>`. No `.tmp` is left behind."""

from __future__ import annotations

import contextlib
import errno
import os


def replace_sandbox_file(sandbox: str, identity: tuple[int, int, int], name: str,
                         data: bytes, *, mode: int, gid: int | None = None) -> None:
    """`identity`: the sandbox's (device, inode, owner uid) as recorded; `gid`: the
    file's group (None: the sandbox's). OSError where the sandbox is not that
    directory, or the job's directory does not allow the write."""
    tmp = f"{name}.tmp"
    dir_fd = os.open(sandbox, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino, st.st_uid) != identity or st.st_uid == 0:
            raise PermissionError(errno.EPERM, "the sandbox is not the job's own directory")
        with contextlib.suppress(FileNotFoundError):  # a stale one (unlink follows nothing)
            os.unlink(tmp, dir_fd=dir_fd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dir_fd)  # fmt: skip
        try:
            try:
                os.fchown(fd, st.st_uid, st.st_gid if gid is None else gid)
                os.fchmod(fd, mode)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):  # it may hold (part of) a private key
                os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)
