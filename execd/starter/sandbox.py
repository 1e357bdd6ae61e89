"""The job's sandbox: who it runs as, its scratch directory, its environment."""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from collections.abc import Iterator
from typing import NamedTuple

from execd.errors import SpawnNoPermissionError
from execd.starter.spec import SCRATCH_DIR_PLACEHOLDER, StarterSpec


class JobUser(NamedTuple):
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]


def _lookup(name: str) -> JobUser | None:
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return None
    groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    return JobUser(pw.pw_name, pw.pw_uid, pw.pw_gid, groups)


def resolve_user(spec: StarterSpec, euid: int) -> JobUser:
    """Owner when we are root, allowed, and the user exists; else SLOT<N>_USER; else nobody.

    Never root: a candidate that resolves to uid 0 is skipped.
    """
    candidates: list[str] = []
    if euid == 0 and spec.allow_runas_owner:
        candidates.append(spec.owner)
    if spec.slot_user:
        candidates.append(spec.slot_user)
    candidates.append("nobody")
    for name in candidates:
        user = _lookup(name)
        if user is not None and user.uid != 0:
            return user
    raise SpawnNoPermissionError(f"no non-root user to run job {spec.job_id} as ({candidates})")


def make_scratch(execute_dir: str, starter_pid: int, user: JobUser) -> str:
    """EXECUTE/dir_<starter pid>, owned by the job user, mode 0700."""
    path = os.path.join(execute_dir, f"dir_{starter_pid}")
    os.mkdir(path, 0o700)
    os.chown(path, user.uid, user.gid)
    os.chmod(path, 0o700)
    return path


def adopt_scratch(path: str, user: JobUser) -> str:
    """A sandbox made before the starter (the shadow's, where a user's plugin may
    have run): only the directory itself is handed over (give_to_user); what is in it
    is already the job user's, made so as it was made."""
    give_to_user(path, user.uid, user.gid)
    return path


def give_to_user(path: str, uid: int, gid: int) -> None:
    """The sandbox directory `path` becomes the job user's, mode 0700, changed on a
    descriptor opened with O_NOFOLLOW | O_DIRECTORY (a link there is refused). Nothing
    under it is touched: every entry in a sandbox is made the user's as it is made (the
    shadow's files and directories, the proxy, the job ad files, a plugin's run files),
    and once user code may have run, a walk as root would give away whatever the user
    moved in (a directory or a file of root's renamed in from elsewhere on the same
    file system)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def walk_tree(path: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `path` (not following links) with its lstat, walked with a
    stack of its own: os.walk and shutil.rmtree recurse per level (before Python 3.12),
    and a job's tree a thousand levels deep ended the starter with RecursionError.
    An entry that cannot be read is skipped."""
    pending = [path]
    while pending:
        try:
            entries = os.scandir(pending.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    pending.append(entry.path)
                yield entry.path, st


RM_ERROR_KEPT = 4096  # bytes of rm's error output read; the rest is read and dropped


def rm_argv(path: str | os.PathLike[str]) -> list[str]:
    """How a sandbox is removed: rm, whatever its depth; links are not followed and other
    file systems mounted below are left. rm, not shutil.rmtree: Python 3.11's recurses
    per level, and a tree a job makes a thousand levels deep raised RecursionError."""
    return ["/bin/rm", "-rf", "--one-file-system", "--", os.fspath(path)]


def rm_error(stderr: bytes, returncode: int) -> str | None:
    """What rm left, from its exit status and the start of its error output."""
    if returncode == 0:
        return None
    return stderr.decode(errors="replace").strip()[:500] or f"rm exited {returncode}"


def remove_tree(path: str | os.PathLike[str]) -> str | None:
    """Remove `path` and everything under it (rm_argv). Returns why something was left
    (rm_error, or why no process could run it), None when all went. Never raises.

    Where no process can be made (a starter whose job was its PID namespace's init: once
    that exits, fork fails with ENOMEM), shutil.rmtree does it, and a tree deeper than
    the interpreter's recursion limit is left behind rather than failing the caller.
    Blocking: the daemon's shadow conversations run the same argv as an asyncio
    subprocess (execd.wire.shadow_end.remove_sandbox)."""
    import shutil  # noqa: PLC0415 - after the job started: off the launch path
    import subprocess  # noqa: PLC0415

    try:
        rm = subprocess.Popen(rm_argv(path), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    except OSError as exc:
        with contextlib.suppress(RecursionError):
            shutil.rmtree(path, ignore_errors=True)
        return f"rm could not run ({exc})" if os.path.lexists(path) else None
    assert rm.stderr is not None
    with rm.stderr:
        kept = rm.stderr.read(RM_ERROR_KEPT)
        while rm.stderr.read(65536):  # a huge tree's errors: drained, never kept
            pass
    return rm_error(kept, rm.wait())


def disk_usage_kb(path: str) -> int:
    """The blocks of everything but directories under `path`, in KiB."""
    total = sum(st.st_blocks * 512 for _, st in walk_tree(path) if not stat.S_ISDIR(st.st_mode))
    return (total + 1023) // 1024


def job_environment(spec: StarterSpec, scratch: str) -> dict[str, str]:
    """The job's own environment plus what HTCondor sets for every job."""
    env = dict(spec.env)
    env["_CONDOR_SCRATCH_DIR"] = scratch
    env["_CONDOR_SLOT"] = spec.slot_name
    env["TMPDIR"] = env["TMP"] = env["TEMP"] = scratch
    env["BATCH_SYSTEM"] = "HTCondor"
    threads = str(max(1, int(spec.cpus)))
    for name in spec.thread_env_vars:  # STARTER_NUM_THREADS_ENV_VARS
        env[name] = threads
    # The slot's assigned resources, as condor_starter names them (the daemon computed
    # them from the slot's ad: _CONDOR_AssignedGPUs, CUDA_VISIBLE_DEVICES, ...)
    env.update(spec.resource_env)
    if any(SCRATCH_DIR_PLACEHOLDER in value for value in env.values()):  # $$(CondorScratchDir)
        env = {k: v.replace(SCRATCH_DIR_PLACEHOLDER, scratch) for k, v in env.items()}
    return env
