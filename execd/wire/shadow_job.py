"""Running a shadow's vanilla job as a plain process in its sandbox, never as root.

What the starter reports about it: the raw wait status for job_exit, and the exit
attributes (ExitBySignal, ExitCode or ExitSignal, JobDuration, ...) in the ads it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shlex
import signal
import time
from pathlib import Path

from execd.wire.job_runner import JobExit, JobLaunch, JobSetupError, exec_failure

__all__ = ["DEFAULT_PATH", "JobExit", "JobProcess", "JobSetupError", "job_argv", "job_env",
           "rss_kb", "run_as_ids"]
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def run_as_ids(owner: str, fallback: str = "nobody") -> tuple[int, int]:
    """(uid, gid) for the job: its Owner where this host has that user, else `fallback`;
    never root."""
    for name in (owner, fallback):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            return entry.pw_uid, entry.pw_gid
    raise JobSetupError(f"neither job owner {owner!r} nor {fallback!r} is a non-root user here")


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


def job_env(job: dict[str, object], sandbox: Path) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "_CONDOR_SCRATCH_DIR": str(sandbox), "TMPDIR": str(sandbox),
           "HOME": str(sandbox)}  # fmt: skip
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

    @classmethod
    def from_launch(cls, launch: JobLaunch) -> JobProcess:
        """The library's runner factory (execd.wire.job_runner.RunnerFactory)."""
        return cls(launch.argv, launch.sandbox, launch.env, launch.ids, launch.stdin_name)

    async def start(self) -> int:
        uid, gid = self.ids
        stdin_path = self.sandbox / self.stdin_name if self.stdin_name else Path(os.devnull)
        with (stdin_path.open("rb") as stdin,
              (self.sandbox / "_condor_stdout").open("wb") as out,
              (self.sandbox / "_condor_stderr").open("wb") as err):  # fmt: skip
            for path in (self.sandbox / "_condor_stdout", self.sandbox / "_condor_stderr"):
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

    def usage(self) -> dict[str, str]:
        """register_job_info's attributes: the process's peak resident set so far."""
        pid = self.proc.pid if self.proc is not None else 0
        self.peak_kb = max(self.peak_kb, rss_kb(pid) or 0)
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
        status = (-code & 0x7F) if code < 0 else (code & 0xFF) << 8
        return JobExit(status, time.monotonic() - self.started_at)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
