"""What the shadow conversation needs of whatever runs its job: the runner contract.

The conversation (execd/wire/shadow.py) transfers the input into a sandbox, then hands
a `JobLaunch` to its runner factory and drives the runner it gets back:

    start() -> pid             the job runs (JobHeldError: it could not be started)
    wait(timeout_s)            its JobExit, or None while it still runs after timeout_s
                               (JobHeldError: it ended in a way that holds the job)
    usage()                    register_job_info's attributes, as expression text
    kill()                     end it now if it still runs; safe to call at any time

Two runners: a plain process (execd/wire/shadow_job.py, the library and its tests) and
execd's own starter through the JobManager (execd/daemon/pool_job.py, `execd run`).
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from execd.errors import ExecdError
from execd.starter.child import IWD_UNREACHABLE

# HTCondor's hold code for a job whose process could not be created.
HOLD_FAILED_TO_CREATE_PROCESS = 6


class JobHeldError(ExecdError):
    """The job must go on hold: the starter's critical error, with HTCondor's codes."""

    def __init__(self, message: str, code: int, subcode: int) -> None:
        super().__init__(message)
        self.code = code
        self.subcode = subcode


class JobSetupError(JobHeldError):
    """The job cannot be started as the job ad asks (no executable, bad arguments)."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message, HOLD_FAILED_TO_CREATE_PROCESS, errno)
        self.errno = errno


def wait_status(returncode: int) -> int:
    """The wait status (as waitpid gives it) of an asyncio subprocess's returncode
    (negative: killed by that signal)."""
    return (-returncode & 0x7F) if returncode < 0 else (returncode & 0xFF) << 8


@dataclass(frozen=True)
class JobExit:
    """How the job ended. `requested`: it was killed on request (vacate, remove, a
    deactivated claim), which HTCondor's starter reports as JOB_SHOULD_REQUEUE;
    `graceful`: by a soft kill it obeyed (a vacate, not a fast shutdown), after which an
    ON_EXIT_OR_EVICT job's sandbox goes back to the shadow, as condor_starter sends it."""

    wait_status: int
    duration_s: float
    requested: bool = False
    graceful: bool = False
    # why the startd evicted it (reason, code, subcode), as condor_starter passes on the
    # startd's vacate reason: the shadow's 004 event says it (else "Unspecified job
    # interruption", code 1005)
    vacate: tuple[str, int, int] | None = None
    # An interactive job's ssh sessions were still open when it exited: its starter
    # waited for them (StarterSpec.wait_for_ssh_sessions), and what the shadow is told
    # is the last session's end (execd.wire.ssh_sessions.JobShell.reported_exit).
    outlived_by_sessions: bool = False

    @property
    def by_signal(self) -> bool:
        return os.WIFSIGNALED(self.wait_status)

    @property
    def code(self) -> int:
        return os.WTERMSIG(self.wait_status) if self.by_signal else os.WEXITSTATUS(self.wait_status)

    @property
    def core_dumped(self) -> bool:
        return self.by_signal and os.WCOREDUMP(self.wait_status)

    def exit_ad(self) -> dict[str, str]:
        """The job's exit as the starter reports it (old-syntax expression text)."""
        ad = {"ExitBySignal": "true" if self.by_signal else "false",
              "JobDuration": repr(round(self.duration_s, 6)), "JobState": '"Exited"'}  # fmt: skip
        if self.by_signal:  # as condor_starter's UserProc/OsProc publish it
            ad["ExitSignal"] = str(self.code)
            ad["ExitReason"] = f'"died on signal {self.code} ({_signal_name(self.code)})"'
            if self.core_dumped:
                ad["JobCoreDumped"] = "true"
        else:
            ad["ExitCode"] = str(self.code)
        if self.vacate is not None:
            reason, code, subcode = self.vacate
            quoted = reason.replace("\\", "\\\\").replace('"', '\\"')
            ad.update(VacateReason=f'"{quoted}"', VacateReasonCode=str(code),
                      VacateReasonSubCode=str(subcode))
        return ad


def _signal_name(number: int) -> str:
    try:
        return signal.strsignal(number) or "Unknown signal"
    except ValueError:
        return "Unknown signal"


@dataclass(frozen=True)
class JobLaunch:
    """The job as the conversation resolved it from the shadow's job ad."""

    job: dict[str, object]  # the shadow's job ad (get_job_info), as values
    argv: list[str]  # argv[0]: the transferred executable in the sandbox, or Cmd
    sandbox: Path  # the input is there; the job's working directory
    env: dict[str, str]
    ids: tuple[int, int]  # (uid, gid) the library runs it as; never root
    stdin_name: str | None  # a transferred file in the sandbox, else /dev/null
    stdout_name: str = "_condor_stdout"
    stderr_name: str = "_condor_stderr"
    # No file transfer (a shared filesystem): the job runs in its Iwd and its stdio
    # names are the job ad's In/Out/Err (relative to the Iwd); None: the sandbox.
    iwd: Path | None = None

    @property
    def workdir(self) -> Path:
        return self.iwd or self.sandbox

    def path(self, name: str) -> Path:
        """A stdio name as a path (relative names are in the working directory)."""
        return self.workdir / name


class JobRunner(Protocol):
    async def start(self) -> int: ...
    def environment(self) -> dict[str, str]: ...  # what the started job runs with
    async def wait(self, timeout_s: float) -> JobExit | None: ...
    async def usage(self) -> dict[str, str]: ...
    def kill(self) -> None: ...


RunnerFactory = Callable[[JobLaunch], JobRunner]


def exec_failure(argv: list[str], code: int, strerror: str | None = None) -> str:
    """HTCondor's words for a job that cannot be executed (os_proc, daemon_core)."""
    detail = strerror or (os.strerror(code) if code else "exec failed")
    if code == errnos.ENOENT:  # a script whose interpreter does not exist?
        with contextlib.suppress(OSError), open(argv[0], "rb") as script:
            head = script.read(1024)
            if head.startswith(b"#!") and head[2:].split():
                interpreter = head[2:].split()[0].decode(errors="replace")
                detail = f"invalid interpreter ({interpreter}) specified on first line of script"
    return (f"{_failed_to_execute(argv)}: {detail} "
            f"(errno={code}: '{os.strerror(code)}')")  # fmt: skip


def spawn_failure(argv: list[str], code: int, detail: str | None) -> str:
    """The hold reason of a job the starter could not start: an Iwd it cannot enter is
    named as daemon_core names it (without an errno); otherwise exec_failure's words."""
    if detail is not None and detail.startswith(IWD_UNREACHABLE):
        return f"{_failed_to_execute(argv)}: {detail}"
    return exec_failure(argv, code)


def _failed_to_execute(argv: list[str]) -> str:
    args = " ".join(argv[1:])
    return f"Failed to execute '{argv[0]}'" + (f" with arguments {args}" if args else "")
