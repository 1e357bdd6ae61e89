"""Running a shadow's vanilla job as a plain process in its sandbox, never as root.

What the starter reports about it: the raw wait status for job_exit, and the exit
attributes (ExitBySignal, ExitCode or ExitSignal, JobDuration, ...) in the ads it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pwd
import shlex
import signal
import time
from pathlib import Path

from execd.classads import lookup_bool
from execd.log import get_logger
from execd.starter.ad_files import ad_file_env, write_ad_files
from execd.wire.classad_codec import WireAd, from_values, long_form
from execd.wire.job_runner import JobExit, JobLaunch, JobSetupError, exec_failure, wait_status
from execd.wire.output_files import std_files

__all__ = ["DEFAULT_PATH", "JobExit", "JobProcess", "JobSetupError", "environment_of",
           "job_argv", "job_env",
           "proxy_name", "rss_kb", "run_as_ids", "run_as_user", "shared_fs_launch",
           "starter_job_ad", "wants_transfer", "write_job_ads"]
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
log = get_logger("wire")


def run_as_user(owner: str, fallback: str = "nobody") -> pwd.struct_passwd:
    """The job's user: its Owner where this host has that user, else `fallback`; never
    root. Looked up once (NSS may be slow): its ids and home directory come from here."""
    for name in (owner, fallback):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return entry
    raise JobSetupError(f"neither job owner {owner!r} nor {fallback!r} is a non-root user here")


def run_as_ids(owner: str, fallback: str = "nobody") -> tuple[int, int]:
    """(uid, gid) of run_as_user."""
    entry = run_as_user(owner, fallback)
    return entry.pw_uid, entry.pw_gid


def job_argv(job: dict[str, object], sandbox: Path, transferred: list[str]) -> list[str]:
    cmd = job.get("Cmd")
    if not isinstance(cmd, str) or not cmd:
        raise JobSetupError("job ad has no Cmd")
    base = os.path.basename(cmd)
    exe = str(sandbox / base) if base in transferred else cmd
    if isinstance(job.get("Arguments"), str):
        try:
            args = shlex.split(str(job["Arguments"]))
        except ValueError as exc:
            raise JobSetupError(f"job Arguments do not parse: {exc}") from None
    else:
        args = str(job.get("Args") or "").split()
    return [exe, *args]


def _proxy_attr(job: dict[str, object]) -> str | None:
    """The job's X509UserProxy (the job ad spells it x509userproxy) if it has one."""
    path = next((v for k, v in job.items() if k.lower() == "x509userproxy"), None)
    return path if isinstance(path, str) and path else None


def proxy_name(job: dict[str, object]) -> str | None:
    """The job's X509 proxy's name in its sandbox (with file transfer)."""
    path = _proxy_attr(job)
    return os.path.basename(path) if path is not None else None


def proxy_path(job: dict[str, object], sandbox: Path, transfer: bool) -> str | None:
    """X509_USER_PROXY as condor_starter sets it (build_job_env): with file transfer the
    proxy's basename in the sandbox (delegated or copied there), else its path, under the
    job's Iwd when relative."""
    path = _proxy_attr(job)
    if path is None:
        return None
    if transfer:
        return str(sandbox / os.path.basename(path))
    iwd = job.get("Iwd")
    return os.path.join(iwd, path) if isinstance(iwd, str) and iwd else path


def environment_of(job: dict[str, object]) -> dict[str, str]:
    """The job ad's Environment (new syntax) as name -> value; JobSetupError when it
    does not parse."""
    env: dict[str, str] = {}
    text = job.get("Environment")
    if isinstance(text, str) and text.strip():
        try:
            pairs = shlex.split(text)
        except ValueError as exc:
            raise JobSetupError(f"job Environment does not parse: {exc}") from None
        for pair in pairs:
            name, sep, value = pair.partition("=")
            if sep and name:
                env[name] = value
    return env


def job_env(job: dict[str, object], sandbox: Path, transfer: bool = True) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "_CONDOR_SCRATCH_DIR": str(sandbox), "TMPDIR": str(sandbox),
           "HOME": str(sandbox)}  # fmt: skip
    env |= environment_of(job)
    proxy = proxy_path(job, sandbox, transfer)
    if proxy is not None:  # condor_starter's wins over the job's own Environment
        env["X509_USER_PROXY"] = proxy
    # Set last, as condor_starter's PublishToEnv after the job's environment is merged:
    # the job's Environment cannot point them elsewhere.
    return env | ad_file_env(str(sandbox))


def starter_job_ad(job_wire: WireAd, job: dict[str, object], sandbox: Path, transfer: bool,
                   home: str | None) -> WireAd:  # fmt: skip
    """The job ad as condor_starter holds it when it writes `.job.ad` (jic_shadow.cpp
    initJobInfo, initWithFileTransfer): `OrigCmd` and `OrigIwd` (the ad's Cmd and Iwd),
    `OSHomeDir` (the job user's home directory, looked up with its ids by run_as_user,
    none where that is empty); with file transfer `Iwd` is the sandbox
    and `Out`/`Err` the sandbox names the job's stdout/stderr are written to
    (`_condor_stdout`, `_condor_stderr`; output_files.std_files), the ad's own in
    `OriginalOut`/`OriginalErr`, where they are not streamed and not /dev/null."""
    edits: dict[str, object] = {}
    for attr in ("Cmd", "Iwd"):
        if isinstance(job.get(attr), str):
            edits[f"Orig{attr}"] = job[attr]
    if home:
        edits["OSHomeDir"] = home
    if transfer:
        for attr, name, streamed in zip(("Out", "Err"), std_files(job),
                                        ("StreamOut", "StreamErr"), strict=True):  # fmt: skip
            if name is not None and lookup_bool(job.get(streamed)) is False:
                edits[attr], edits[f"Original{attr}"] = name, job[attr]
        edits["Iwd"] = str(sandbox)
    return dict(job_wire) | from_values(edits)


def write_job_ads(sandbox: Path, job: WireAd, machine: WireAd, gjid: str,
                  owner: tuple[int, int]) -> None:  # fmt: skip
    """`.job.ad` (the shadow's job ad) and `.machine.ad` (the slot's public ad, as the
    startd hands it to its starter) in the sandbox, private attributes left out
    (execd/starter/ad_files.py), made the job's user's (`owner`) on their descriptors:
    nothing in a sandbox is handed over by a walk later. A failure is logged and the
    job runs without them, as condor_starter's."""
    try:
        write_ad_files(str(sandbox), long_form(job), long_form(machine), *owner)
    except OSError as exc:
        log.warning("job_ad_files_not_written", job=gjid, error=str(exc))


def wants_transfer(job: dict[str, object], filesystem_domain: str) -> bool:
    """ShouldTransferFiles as HTCondor's starter reads it: NO, YES, or IF_NEEDED (only
    when the job's FileSystemDomain is not this node's)."""
    how = str(job.get("ShouldTransferFiles") or "YES").upper()
    if how == "NO":
        return False
    if how == "IF_NEEDED":
        return job.get("FileSystemDomain") != filesystem_domain
    return True


def shared_fs_launch(launch: JobLaunch) -> JobLaunch:
    """A job without file transfer: it runs in its Iwd with the job ad's In/Out/Err."""
    job = launch.job

    def name(attr: str) -> str:
        value = job.get(attr)
        return value if isinstance(value, str) and value else os.devnull

    stdin = name("In")
    iwd = job.get("Iwd")
    return dataclasses.replace(
        launch, iwd=Path(str(iwd)) if isinstance(iwd, str) and iwd else launch.sandbox,
        stdin_name=None if stdin == os.devnull else stdin,
        stdout_name=name("Out"), stderr_name=name("Err"))  # fmt: skip


def rss_kb(pid: int) -> int | None:
    """The process's resident set size in KiB (VmRSS), None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class JobProcess:
    """One job process: started in its sandbox with stdout/stderr into
    `_condor_stdout`/`_condor_stderr` (stdin from its transferred In, else /dev/null)."""

    def __init__(self, argv: list[str], sandbox: Path, env: dict[str, str],
                 ids: tuple[int, int], stdin_name: str | None) -> None:  # fmt: skip
        self.argv, self.sandbox, self.env, self.ids = argv, sandbox, env, ids
        self.stdin_name = stdin_name
        self.proc: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.start_date = 0
        self.peak_kb = 0
        self.stdio = ("_condor_stdout", "_condor_stderr")  # relative to the sandbox

    @classmethod
    def from_launch(cls, launch: JobLaunch) -> JobProcess:
        """The library's runner factory (execd.wire.job_runner.RunnerFactory)."""
        proc = cls(launch.argv, launch.workdir, launch.env, launch.ids, launch.stdin_name)
        proc.stdio = (launch.stdout_name, launch.stderr_name)
        return proc

    def environment(self) -> dict[str, str]:
        return dict(self.env)

    async def start(self) -> int:
        uid, gid = self.ids
        stdin_path = self.sandbox / self.stdin_name if self.stdin_name else Path(os.devnull)
        out_path, err_path = (self.sandbox / name for name in self.stdio)
        with (stdin_path.open("rb") as stdin, out_path.open("wb") as out,
              err_path.open("wb") as err):  # fmt: skip
            for path in (out_path, err_path):
                if path.is_file():  # not /dev/null
                    os.chown(path, uid, gid)
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, cwd=self.sandbox, env=self.env, stdin=stdin, stdout=out,
                    stderr=err, user=uid, group=gid, extra_groups=[], start_new_session=True,
                )
            except OSError as exc:
                raise JobSetupError(exec_failure(self.argv, exc.errno or 0, exc.strerror),
                                    exc.errno or 0) from None
        self.started_at = time.monotonic()
        self.start_date = int(time.time())
        return self.proc.pid

    async def usage(self) -> dict[str, str]:
        """register_job_info's attributes: the process's peak resident set so far."""
        pid = self.proc.pid if self.proc is not None else 0
        if self.proc is not None and self.proc.returncode is None:  # a reaped pid may be
            self.peak_kb = max(self.peak_kb, rss_kb(pid) or 0)  # another process's now
        return {"JobPid": str(pid), "NumPids": "1", "JobState": '"Running"',
                "JobStartDate": str(self.start_date), "ImageSize": str(self.peak_kb),
                "ResidentSetSize": str(self.peak_kb),
                "MemoryUsage": "((ResidentSetSize + 1023) / 1024)"}  # fmt: skip

    async def wait(self, timeout_s: float) -> JobExit | None:
        """The exit, or None if the job still runs after timeout_s."""
        assert self.proc is not None
        try:
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout_s)
        except TimeoutError:
            return None
        code = self.proc.returncode
        assert code is not None
        return JobExit(wait_status(code), time.monotonic() - self.started_at)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
