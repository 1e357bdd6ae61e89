"""`.update.ad`: the slot's ad, rewritten into a running job's sandbox as the slot's
update is due, and what the job's updates take back from it.

condor_startd (Resource::refresh_sandbox_ad, called as a slot's collector update is
made, for the slots whose update is due: their state changed, or UPDATE_INTERVAL passed;
never for a direct query) writes the slot's public ad, private attributes left out, to
`.update.ad.tmp` in the job's directory as the job's user and renames it to
`.update.ad`; it does so only while the job's starter has sent its first update and not
yet its final one. With
STARTER_NESTED_SCRATCH (25.x's default) that directory is `dir_<pid>/htcondor`, the
job's cwd's sibling; without, `dir_<pid>` itself, which is where execd puts it: execd's
sandbox is `dir_<pid>` and has no nested layout. condor_starter (JICShadow::
publishStartdUpdates) copies `CpusUsage`, and for each metric of STARTD_CRON_<name>_METRICS
`<R>Usage`, `<R>AverageUsage` and `Recent<R>Usage`, from that file into each update and
the exit's ad: an attribute the file lacks is deleted from the update; no file yet,
nothing copied. execd takes the same attributes from the ad it last wrote (the file is
the job's, and a job could edit what it reports).

The daemon is root and the sandbox is the job's: the directory is opened without
following a link and must be the one recorded at the job's start (device, inode, the
job's uid), the temporary file is created exclusively, never through a link, given to
the job's user, and renamed into place. Writes run on a thread of their own (a hung
sandbox filesystem holds it, not the event loop), one in flight per job; the sandbox's
removal first closes the file's writer and waits for a write in flight, so no write
lands once `rm` has begun (it would leave the directory behind).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from execd import log
from execd.classads import ClassAdError, parse_expr
from execd.starter.ad_files import AD_FILE_MODE, UPDATE_AD_FILES
from execd.wire.blocking_worker import BlockingWorker
from execd.wire.classad_codec import WireAd, is_private, long_form

logger = log.get_logger("pool")
UPDATE_AD, UPDATE_AD_TMP = UPDATE_AD_FILES
WRITE_TIMEOUT_S = 30.0  # one write; a slower one is logged (it goes on in its thread)
# The sandbox's removal waits this long for a write in flight, then goes on regardless.
CLOSE_TIMEOUT_S = 60.0
# A job's first update waits this long for its first write (then goes without it).
FIRST_WRITE_WAIT_S = 2.0
# A periodic publish rewrites the file when the slot's state is not what it last was...
_STATE_KEYS = ("State", "Activity", "EnteredCurrentState", "EnteredCurrentActivity")
# ...or its interval has (nearly: rounds are UPDATE_INTERVAL apart, give or take) passed.
INTERVAL_SLACK = 0.9
_WORKER = BlockingWorker("execd-update-ad")


@dataclass(frozen=True)
class SandboxIdentity:
    """The job's sandbox as it was when the job started: where, which directory, whose."""

    path: str
    dev: int
    ino: int
    uid: int
    gid: int

    @classmethod
    def of(cls, path: str, uid: int, gid: int) -> SandboxIdentity | None:
        """The sandbox now (lstat: a link is no sandbox), or None."""
        try:
            st = os.lstat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        return cls(path, st.st_dev, st.st_ino, uid, gid)


def write_update_ad(sandbox: SandboxIdentity, text: str) -> None:
    """`text` to .update.ad.tmp in the sandbox (the job's user's, 0644), renamed over
    .update.ad; OSError if the sandbox is not the recorded directory owned by the job's
    user (never root), or where the job's directory does not allow it."""
    dir_fd = os.open(sandbox.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        st = os.fstat(dir_fd)
        if (st.st_dev, st.st_ino) != (sandbox.dev, sandbox.ino) or st.st_uid != sandbox.uid \
                or st.st_uid == 0:  # fmt: skip
            raise PermissionError(errno.EPERM, "the sandbox is not the job's own directory")
        with contextlib.suppress(FileNotFoundError):  # a stale one (unlink follows nothing)
            os.unlink(UPDATE_AD_TMP, dir_fd=dir_fd)
        fd = os.open(UPDATE_AD_TMP, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, AD_FILE_MODE, dir_fd=dir_fd)  # fmt: skip
        try:
            try:
                os.fchown(fd, sandbox.uid, sandbox.gid)
                os.fchmod(fd, AD_FILE_MODE)
                view = memoryview(text.encode())
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.rename(UPDATE_AD_TMP, UPDATE_AD, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(UPDATE_AD_TMP, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def update_attrs(settings: Any) -> list[str]:
    """What condor_starter copies from `.update.ad` into its updates: CpusUsage, and for
    each STARTD_CRON_<name>_METRICS entry `<type>:<R>`, <R>Usage, <R>AverageUsage and
    Recent<R>Usage."""
    names = ["CpusUsage"]
    for job in settings.get_list("STARTD_CRON_JOBLIST") or []:
        for pair in settings.get_list(f"STARTD_CRON_{job}_METRICS") or []:
            _, _, resource = str(pair).partition(":")
            if resource:
                names += [f"{resource}Usage", f"{resource}AverageUsage",
                          f"Recent{resource}Usage"]  # fmt: skip
    return names


def copy_update_attrs(update: dict[str, Any], written: WireAd | None,
                      names: Iterable[str]) -> None:  # fmt: skip
    """condor_starter's CopyAttribute of each name from the last `.update.ad` into
    `update` (as an expression), deleting one the ad lacks; nothing
    without an ad written yet. Names compare case-insensitively, as in a ClassAd (the
    slot ad says CPUsUsage, the update CpusUsage)."""
    if written is None:
        return
    by_lower = {name.lower(): value for name, value in written.items()}
    for name in names:
        for key in [k for k in update if k.lower() == name.lower()]:
            del update[key]
        if (value := by_lower.get(name.lower())) is not None:
            with contextlib.suppress(ClassAdError):  # (our own ad: it parsed before)
                update[name] = parse_expr(value)


class UpdateAdFile:
    """One running job's `.update.ad`: publish() at each of its slot's publishes (while
    enabled), close() before its sandbox is removed.

    At most one write per job is on the writer's thread at a time: it is in flight until
    the thread has finished it (a hung filesystem keeps it so, never past its time limit
    only); a publish meanwhile keeps only the latest ad, written once that one returns.
    So a hung sandbox holds one write and one ad per job, and nothing that awaits it."""

    def __init__(self, sandbox: SandboxIdentity, job: str) -> None:
        self.sandbox = sandbox
        self.job = job
        self.enabled = False  # from the job's start to its end
        self.closed = False  # read by the writer's thread: no write once set
        self.written: WireAd | None = None  # the ad last written
        self.writes = 0
        self._pending: WireAd | None = None
        self._task: asyncio.Task[None] | None = None  # while a write is in flight
        self._published_at: float | None = None  # (monotonic) the last publish taken
        self._published_state: tuple[str, ...] = ()
        self._warned = False
        self._first_awaited = False

    def publish(self, public: WireAd, interval_s: float | None = None) -> None:
        """Write the slot's public ad (private attributes left out). With `interval_s`
        (a periodic publish) only when the slot's state or activity changed since the
        last write asked for, or `interval_s` has passed since (condor_startd's rule:
        a slot's ad is sent, and its .update.ad written, when its update is due)."""
        if self.closed or not self.enabled:
            return
        state = tuple(str(public.get(key, "")) for key in _STATE_KEYS)
        mono = time.monotonic()
        if interval_s is not None and self._published_at is not None \
                and state == self._published_state \
                and mono - self._published_at < interval_s * INTERVAL_SLACK:  # fmt: skip
            return
        self._published_at, self._published_state = mono, state
        self._pending = {k: v for k, v in public.items() if not is_private(k)}
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """The pending ad, one write at a time, until none is pending."""
        while self._pending is not None and not self.closed:
            ad, self._pending = self._pending, None
            written = _WORKER.submit(self._write, ad)
            try:
                try:
                    done = await asyncio.wait_for(asyncio.shield(written), WRITE_TIMEOUT_S)
                except TimeoutError:
                    self._not_written(f"no write within {WRITE_TIMEOUT_S:g} s (still waiting)")
                    done = await written  # in flight until the thread returns
            except (OSError, ValueError) as exc:
                self._not_written(str(exc))
                continue
            if done:
                self.written = ad
                self.writes += 1
                logger.debug("update_ad_written", job=self.job, writes=self.writes)

    def _not_written(self, error: str) -> None:
        """Warned once per job (a job can make the file a directory for good), then
        at debug level."""
        level = logger.debug if self._warned else logger.warning
        self._warned = True
        level("update_ad_not_written", job=self.job, error=error)

    async def first_written(self) -> None:
        """Until the first write asked for is done, once per job and for at most
        FIRST_WRITE_WAIT_S: a job's first update carries its CpusUsage, and a hung
        sandbox holds that update no longer."""
        if self._first_awaited or self.written is not None or self._task is None:
            return
        self._first_awaited = True
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._task), FIRST_WRITE_WAIT_S)

    async def drained(self) -> None:
        """Until no write is in flight nor pending (a hung one: for as long as it hangs;
        nothing in the daemon waits on this)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    def _write(self, ad: WireAd) -> bool:
        """On the writer's thread (the ad's long form too): nothing once closed (the
        sandbox goes)."""
        if self.closed:
            return False
        write_update_ad(self.sandbox, long_form(ad))
        return True

    async def close(self) -> None:
        """No more writes; returns once none is in flight, or after CLOSE_TIMEOUT_S,
        logged."""
        self.closed = True
        self.enabled = False
        if self._task is None or self._task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), CLOSE_TIMEOUT_S)
        except TimeoutError:
            logger.warning("update_ad_write_hung", job=self.job, sandbox=self.sandbox.path)
