"""One multi-file run of a file transfer plugin for a job's input URLs, as
condor_starter's InvokeMultipleFileTransferPlugin: the URLs of one plugin go in one
run, `PLUGIN -infile .NAME.in -outfile .NAME.out` in the job's sandbox (NAME the
plugin's basename), the infile one `[ Url = ...; LocalFileName = ... ]` ad a URL.

The run is the job's user's (never root's), in the sandbox, in a session of its own
and in a cgroup of its own (PluginJob.cgroup, entered before exec), with a small
environment (execd/wire/url_inputs.py plugin_env, and the job's NAME_* variables: run_env).
Its stdout and stderr go to a pipe of ours, read (never more than OUTPUT_KEEP bytes
kept, for the log) so a chatty plugin never blocks, and the wait ends when the plugin
does. After the run, or once it is past the timeout (MAX_FILE_TRANSFER_PLUGIN_LIFETIME),
its session and its cgroup (cgroup.kill) are killed and the cgroup removed: nothing it
started outlives it; the waits after a kill are bounded (KILL_WAIT_S). The outfile is
read off the loop as the job's user, never through a link, at most MAX_OUTFILE bytes,
and only while it is a file of the user's with one link. On success the two files are
removed, as condor_starter does; after a failure they stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import itertools
import os
import re
import signal
import stat
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execd.cgroups.tree import JobCgroup
from execd.errors import CgroupError
from execd.log import get_logger
from execd.starter.child import PR_SET_NO_NEW_PRIVS
from execd.wire.owner_thread import OwnerThread
from execd.wire.transfer_plugins import Plugin, PluginRun

log = get_logger("wire")
OUTPUT_KEEP = 16 * 1024
QUERY = re.compile(r"\?[^\s\"']*")  # a URL's query in a plugin's output: never logged
MAX_OUTFILE = 4 * 1024 * 1024
KILL_WAIT_S = 3.0
OUTFILE_READ_TIMEOUT_S = 60.0
_RUN_NUMBERS = itertools.count(1)  # each run's cgroup's name (run_cgroup)
OUTFILE_RESERVE = 16 * 1204  # condor_starter's (sic) preallocation


@dataclass(frozen=True)
class PluginJob:
    """Who runs the plugin and where: the job's ids, its sandbox, its environment, and
    the cgroup each run is made in and killed with (None: no cgroup v2 delegation;
    then the job's own plugins are refused: execd/wire/url_inputs.py)."""

    sandbox: Path
    owner: tuple[int, int]
    env: dict[str, str]
    timeout_s: float
    cgroup: JobCgroup | None = None
    job_env: dict[str, str] = dataclasses.field(default_factory=dict)  # its Environment


def plugin_name(plugin: Plugin) -> str:
    """condor's FileTransferPlugin name: the basename up to `_plugin` (else without its
    extension), upper case; PELICAN for one that handles pelican://."""
    if any(m.lower() == "pelican" for m in plugin.methods):
        return "PELICAN"
    base = os.path.basename(plugin.path)
    end = base.find("_plugin")
    if end < 0:
        end = base.rfind(".") if "." in base else len(base)
    return base[:end].upper()


def run_env(plugin: Plugin, job: PluginJob) -> dict[str, str]:
    """The plugin's environment: the job's `NAME_*` variables (any case) over the
    base one, as condor's mergePluginSpecificEnvironment (CURL_*, PELICAN_*)."""
    prefix = plugin_name(plugin) + "_"
    own = {k: v for k, v in job.job_env.items() if k.upper().startswith(prefix)}
    return job.env | own


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def infile_text(items: Sequence[tuple[str, str]]) -> str:
    """The plugin's infile: one ad a (URL, local file) pair."""
    return "".join(f"[ Url = {_quote(url)}; LocalFileName = {_quote(local)} ]\n"
                   for url, local in items)  # fmt: skip


def _create_owned(path: Path, text: str, owner: tuple[int, int]) -> None:
    """A new file of the job's user (a name already there is replaced, never followed;
    a directory there is an OSError)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
        if os.geteuid() == 0:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def read_outfile(path: Path, uid: int) -> str | None:
    """The outfile's text (the first MAX_OUTFILE bytes); None when it is missing, a
    link, not a regular file, unreadable, or not the one we made: another owner's than
    `uid` or with more than one link (a file of root's the plugin renamed or
    hard-linked onto its name). Called with the job user's file-access ids
    (read_outfile_as_user), as condor_starter reads it as the user."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != uid or info.st_nlink != 1:
            return None
        return os.read(fd, MAX_OUTFILE).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


async def read_outfile_as_user(path: Path, owner: tuple[int, int]) -> str | None:
    """read_outfile in a thread with the job user's file-access ids (the daemon's own
    when it is not root), off the loop, bounded in time (None past it)."""
    ids = owner if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    worker = OwnerThread(ids, name="outfile-as-owner", timeout_s=OUTFILE_READ_TIMEOUT_S)
    try:
        return await worker.call(read_outfile, path, ids[0])
    except OSError:
        return None
    finally:
        worker.close()


async def _drain(stream: asyncio.StreamReader, kept: bytearray) -> None:
    """All of the plugin's output read, its last OUTPUT_KEEP bytes kept in `kept`."""
    while chunk := await stream.read(64 * 1024):
        kept += chunk
        del kept[:-OUTPUT_KEEP]


async def _output_pipe() -> tuple[int, asyncio.StreamReader, asyncio.ReadTransport]:
    """A pipe for the plugin's stdout and stderr that is ours, not the Process's: its
    wait() then ends when the plugin does, whoever still holds the pipe."""
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader(limit=OUTPUT_KEEP)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_end, "rb", 0))
    except BaseException:
        os.close(write_end)
        raise
    return write_end, stream, transport


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _enter(cgroup: JobCgroup | None, owner: tuple[int, int] | None) -> Callable[[], None]:
    """What the forked plugin does before exec: enter the run's cgroup (as root, so
    nothing it starts is outside it), then become the job's user."""
    procs = str(cgroup.procs_file) if cgroup is not None else None
    # resolved here, in the parent: the forked child imports nothing
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def enter() -> None:
        if procs is not None:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, str(os.getpid()).encode())
            finally:
                os.close(fd)
        if owner is not None:
            os.setgroups([])
            os.setgid(owner[1])
            os.setuid(owner[0])
            # as the job itself (execd/starter/child.py): no setuid or file-capability
            # program it runs gives it more than the job has
            if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")

    return enter


def _kill_run(pid: int, cgroup: JobCgroup | None) -> None:
    """Everything the run started: its session, and (cgroup.kill) what left it."""
    _kill_session(pid)
    if cgroup is not None:
        with contextlib.suppress(OSError, CgroupError):
            cgroup.fs.write(cgroup.slice / "cgroup.kill", "1")


async def _bounded(awaitable: Awaitable[Any]) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(awaitable, KILL_WAIT_S)


def run_cgroup(base: JobCgroup) -> JobCgroup:
    """The cgroup of one run: `<slot>.plugins.<n>.slice` next to `base` (the slot's
    `<slot>.plugins.slice`), a name no other run has, so that removing one after a
    cancelled conversation never races the next job's run. One a crash leaves is an
    orphan recovery removes."""
    name = base.slice.name.removesuffix(".slice")
    return JobCgroup(base.fs, base.slice.with_name(f"{name}.{next(_RUN_NUMBERS)}.slice"),
                     base.controllers)  # fmt: skip


async def _run(argv: list[str], job: PluginJob, env: dict[str, str]) -> tuple[PluginRun, str]:
    """Run one plugin command as the job's user in a cgroup of its own; how it ended
    and its output's tail. Whatever it started is killed after it, success or not."""
    cgroup = run_cgroup(job.cgroup) if job.cgroup is not None else None
    if cgroup is not None:
        try:
            await asyncio.to_thread(cgroup.create)
        except (OSError, CgroupError) as exc:
            return PluginRun(exec_error=f"cannot make its cgroup: {exc}", outfile=None), ""
    try:
        return await _run_in(argv, job, env, cgroup)
    finally:
        if cgroup is not None:
            try:
                await asyncio.to_thread(cgroup.destroy)
            except (OSError, CgroupError) as exc:
                log.error("transfer_plugin_cgroup_not_removed", cgroup=str(cgroup.slice),
                          error=str(exc))  # fmt: skip


async def _run_in(argv: list[str], job: PluginJob, env: dict[str, str],
                  cgroup: JobCgroup | None) -> tuple[PluginRun, str]:  # fmt: skip
    owner = job.owner if os.geteuid() == 0 else None
    write_end, stream, transport = await _output_pipe()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=write_end, stderr=write_end,
            cwd=job.sandbox, env=env, start_new_session=True,
            preexec_fn=_enter(cgroup, owner))  # fmt: skip
    except OSError as exc:
        transport.close()
        return PluginRun(exec_error=exc.strerror or str(exc), outfile=None), ""
    except (ValueError, subprocess.SubprocessError) as exc:  # a NUL in a URL; no cgroup
        transport.close()
        return PluginRun(exec_error=str(exc), outfile=None), ""
    finally:
        os.close(write_end)
    kept = bytearray()
    reader = asyncio.ensure_future(_drain(stream, kept))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), job.timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        _kill_run(proc.pid, cgroup)  # what it left too, success or not
        if proc.returncode is None and not timed_out:  # cancelled
            reader.cancel()
            transport.close()
    await _bounded(proc.wait())  # killed: bounded all the same
    # The output's end: at once once all is killed; a child that left the session
    # (no cgroup) may hold the pipe: read for a bounded time, then stop.
    await _bounded(asyncio.shield(reader))
    reader.cancel()
    transport.close()
    code = 0 if timed_out else proc.returncode
    if code is None:  # still not reaped after the kill
        code = -signal.SIGKILL
    run = PluginRun(exit_code=code if code > 0 else 0, signal=-code if code < 0 else 0,
                    timed_out=timed_out, timeout_s=job.timeout_s)  # fmt: skip
    return run, bytes(kept).decode(errors="replace")


def _executable(plugin: Plugin, job: PluginJob) -> str:
    """A job's own plugin is named relative to its sandbox (as condor_starter runs it,
    from its working directory), never looked up in PATH."""
    if plugin.from_job and not os.path.isabs(plugin.path):
        return str(job.sandbox / plugin.path)
    return plugin.path


def _logged(plugin: Plugin, urls: int, run: PluginRun, output: str) -> None:
    failed = run.timed_out or run.signal or run.exit_code or run.exec_error
    # The output only after a failure: a plugin may print what a URL carries.
    (log.warning if failed else log.info)("transfer_plugin_ran", plugin=plugin.path, urls=urls,
            exit_code=run.exit_code, signal=run.signal, timed_out=run.timed_out,
            exec_error=run.exec_error or None,
            output=QUERY.sub("?...", output[-2048:]) if failed else None)  # fmt: skip


async def run_plugin(plugin: Plugin, items: Sequence[tuple[str, str]],
                     job: PluginJob) -> PluginRun:  # fmt: skip
    """Run multi-file `plugin` for (URL, local path) `items`; how it ended and its outfile."""
    name = os.path.basename(plugin.path)
    infile, outfile = job.sandbox / f".{name}.in", job.sandbox / f".{name}.out"
    try:
        await _make_run_files(infile, outfile, items, job)
    except OSError as exc:  # a directory of that name the shadow made: a hold, no crash
        return PluginRun(exec_error=f"cannot create {exc.filename}: {exc.strerror}",
                         outfile=None)  # fmt: skip
    run, output = await _run([_executable(plugin, job), "-infile", str(infile),
                              "-outfile", str(outfile)], job, run_env(plugin, job))  # fmt: skip
    _logged(plugin, len(items), run, output)
    if run.exec_error:
        return run
    return dataclasses.replace(run, outfile=await read_outfile_as_user(outfile, job.owner))


async def run_single(plugin: Plugin, url: str, local: str, job: PluginJob) -> tuple[PluginRun, str]:
    """Run a single-file plugin (`PLUGIN URL LOCAL`); how it ended and what it printed
    (its statistics, one attribute a line: TransferError, TransferUrl...)."""
    run, output = await _run([_executable(plugin, job), url, local], job, run_env(plugin, job))
    _logged(plugin, 1, run, output)
    return run, output


async def _make_run_files(infile: Path, outfile: Path, items: Sequence[tuple[str, str]],
                          job: PluginJob) -> None:  # fmt: skip
    """Off the loop: the infile may hold many long URLs; the outfile is filled with
    spaces first, as condor_starter's, so a plugin can still report on a full disk."""
    await asyncio.to_thread(_create_owned, infile, infile_text(items), job.owner)
    await asyncio.to_thread(_create_owned, outfile, " " * OUTFILE_RESERVE, job.owner)


def remove_run_files(plugin: Plugin, sandbox: Path) -> None:
    name = os.path.basename(plugin.path)
    for path in (sandbox / f".{name}.in", sandbox / f".{name}.out"):
        with contextlib.suppress(OSError):
            os.unlink(path)
