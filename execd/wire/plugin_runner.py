"""One multi-file run of a file transfer plugin for a job's input URLs, as
condor_starter's InvokeMultipleFileTransferPlugin: the URLs of one plugin go in one
run, `PLUGIN -infile .NAME.in -outfile .NAME.out` in the job's sandbox (NAME the
plugin's basename), the infile one `[ Url = ...; LocalFileName = ... ]` ad a URL.

The run is the job's user's (never root's), in the sandbox, in a session of its own,
with a small environment: PATH, _CONDOR_JOB_AD and _CONDOR_MACHINE_AD (the files the
sandbox has), X509_USER_PROXY when the job has a proxy. Its stdout and stderr are
read (never more than OUTPUT_KEEP bytes kept, for the log) so a chatty plugin never
blocks; one that runs past the timeout (MAX_FILE_TRANSFER_PLUGIN_LIFETIME) has its
session killed. The outfile is read as root, never through a link, at most
MAX_OUTFILE bytes. On success the two files are removed, as condor_starter does;
after a failure they stay (the job goes on hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import re
import signal
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from execd.log import get_logger
from execd.wire.transfer_plugins import Plugin, PluginRun

log = get_logger("wire")
OUTPUT_KEEP = 16 * 1024
QUERY = re.compile(r"\?[^\s\"']*")  # a URL's query in a plugin's output: never logged
MAX_OUTFILE = 4 * 1024 * 1024
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class PluginJob:
    """Who runs the plugin and where: the job's ids, its sandbox, its environment."""

    sandbox: Path
    owner: tuple[int, int]
    env: dict[str, str]
    timeout_s: float


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def infile_text(items: Sequence[tuple[str, str]]) -> str:
    """The plugin's infile: one ad a (URL, local file) pair."""
    return "".join(f"[ Url = {_quote(url)}; LocalFileName = {_quote(local)} ]\n"
                   for url, local in items)  # fmt: skip


def _create_owned(path: Path, text: str, owner: tuple[int, int]) -> None:
    """A new file of the job's user (a name already there is replaced, never followed)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
        if os.geteuid() == 0:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def read_outfile(path: Path) -> str | None:
    """The outfile's text (the first MAX_OUTFILE bytes); None when it is missing, a
    link, not a regular file or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_OUTFILE).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


async def _drain(stream: asyncio.StreamReader) -> bytes:
    """All of the plugin's output read, its last OUTPUT_KEEP bytes kept."""
    kept = b""
    while chunk := await stream.read(64 * 1024):
        kept = (kept + chunk)[-OUTPUT_KEEP:]
    return kept


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _run(argv: list[str], job: PluginJob) -> tuple[PluginRun, str]:
    """Run one plugin command as the job's user; how it ended and its output's tail."""
    ids = {"user": job.owner[0], "group": job.owner[1], "extra_groups": []} \
        if os.geteuid() == 0 else {}  # fmt: skip
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, cwd=job.sandbox, env=job.env,
            start_new_session=True, **ids)  # type: ignore[arg-type]  # fmt: skip
    except OSError as exc:
        return PluginRun(exec_error=exc.strerror or str(exc), outfile=None), ""
    assert proc.stdout is not None
    reader = asyncio.ensure_future(_drain(proc.stdout))
    timed_out = False
    try:
        await asyncio.wait_for(proc.wait(), job.timeout_s)
    except TimeoutError:
        timed_out = True
        _kill_session(proc.pid)
        await proc.wait()
    finally:
        if proc.returncode is None:  # cancelled: the plugin never outlives its job
            _kill_session(proc.pid)
            reader.cancel()
    _kill_session(proc.pid)  # a child it left behind holds the pipe open
    try:
        output = await asyncio.wait_for(reader, KILL_WAIT_S)
    except TimeoutError:
        reader.cancel()
        output = b""
    code = 0 if timed_out else proc.returncode or 0  # killed for its time: no signal, as condor
    run = PluginRun(exit_code=code if code > 0 else 0, signal=-code if code < 0 else 0,
                    timed_out=timed_out, timeout_s=job.timeout_s)  # fmt: skip
    return run, output.decode(errors="replace")


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
    _create_owned(infile, infile_text(items), job.owner)
    _create_owned(outfile, "", job.owner)
    run, output = await _run([_executable(plugin, job), "-infile", str(infile),
                              "-outfile", str(outfile)], job)  # fmt: skip
    _logged(plugin, len(items), run, output)
    if run.exec_error:
        return run
    return dataclasses.replace(run, outfile=read_outfile(outfile))


async def run_single(plugin: Plugin, url: str, local: str, job: PluginJob) -> tuple[PluginRun, str]:
    """Run a single-file plugin (`PLUGIN URL LOCAL`); how it ended and what it printed
    (its statistics, one attribute a line: TransferError, TransferUrl...)."""
    run, output = await _run([_executable(plugin, job), url, local], job)
    _logged(plugin, 1, run, output)
    return run, output


def remove_run_files(plugin: Plugin, sandbox: Path) -> None:
    name = os.path.basename(plugin.path)
    for path in (sandbox / f".{name}.in", sandbox / f".{name}.out"):
        with contextlib.suppress(OSError):
            os.unlink(path)
