"""The daemon's side of a starter: spawn it, signal it, collect its report.

A starter runs `python -S -m execd.starter SPEC.json` in its own session (it must
outlive the daemon, which later re-adopts it) and writes its report durably to
`report_path` before it exits. Once the starter zygote is up (execd/starter/zygote.py),
starters are forked from it instead: faster to start and sharing their modules' pages.
Control is by signal (see execd/starter/run.py):

    suspend()   SIGUSR1   freeze the job's cgroup
    continue_() SIGUSR2   thaw it
    soft_kill() SIGTERM   thaw, the job's KillSig, hard kill after the vacate time
    hard_kill() SIGQUIT   cgroup.kill now
    kill_family()         SIGKILL the starter and cgroup.kill the job (KILLING_TIMEOUT)
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import execd
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import JobCgroup
from execd.errors import CgroupError
from execd.starter.report import read_report, write_durably
from execd.starter.spec import CONTROL_SIGNALS, StarterSpec

PACKAGE_PARENT = str(Path(execd.__file__).resolve().parent.parent)


@contextlib.contextmanager
def control_signals_blocked() -> Iterator[None]:
    """Block CONTROL_SIGNALS in this thread; a process started meanwhile inherits that."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class StarterHandle:
    """One running starter; methods are safe to call after it has exited.

    `proc` is None for a starter that is not our child: one forked by the starter zygote
    (followed through `pidfd`, so a reused pid is never signalled) or one re-adopted
    after a daemon restart (known by pid only).
    """

    def __init__(
        self,
        spec: StarterSpec,
        proc: subprocess.Popen[bytes] | None,
        pid: int | None = None,
        pidfd: int | None = None,
    ) -> None:
        self.spec = spec
        self.proc = proc
        self.pidfd = pidfd
        self.exited = False
        self._pidfd_lock = threading.Lock()  # wait() closes the pidfd that _signal uses
        if proc is not None:
            self.pid = proc.pid
        elif pid is not None:
            self.pid = pid
        else:
            raise ValueError("a starter handle needs the process or its pid")

    def _signal(self, signo: int) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signo)
            return
        with self._pidfd_lock:
            if self.exited:
                return
            try:
                if self.pidfd is not None:
                    signal.pidfd_send_signal(self.pidfd, signo)
                else:
                    os.kill(self.pid, signo)
            except ProcessLookupError:
                return

    def suspend(self) -> None:
        self._signal(signal.SIGUSR1)

    def continue_(self) -> None:
        self._signal(signal.SIGUSR2)

    def soft_kill(self) -> None:
        self._signal(signal.SIGTERM)

    def hard_kill(self) -> None:
        self._signal(signal.SIGQUIT)

    def kill_family(self, fs: CgroupFS | None = None, timeout: float = 5.0) -> None:
        """The last resort after KILLING_TIMEOUT: the starter and every job process.

        A starter killed here leaves no report, so one is written for it; a job cgroup
        that cannot be emptied even now is named in it (SlotBrokenReason: the daemon
        marks the slot broken).
        """
        self._signal(signal.SIGKILL)
        base = Path(self.spec.cgroup_mount) / self.spec.base_cgroup
        job = JobCgroup(fs or CgroupFS(), base / f"{self.spec.slot_name}.slice", frozenset())
        broken: str | None = None
        try:
            job.destroy(timeout)
        except CgroupError as exc:
            broken = str(exc)
        self._gone(timeout=1.0)  # a starter that wrote its report as it died keeps it
        if os.path.exists(self.spec.report_path):
            return
        report: dict[str, Any] = {"JobId": self.spec.job_id, "ExitReason": "starter_killed"}
        if broken:
            report["SlotBrokenReason"] = broken
        write_durably(self.spec.report_path, report)

    def _gone(self, timeout: float) -> bool:
        """Wait up to `timeout` for the starter to be gone; True when it is."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        with self._pidfd_lock:
            if self.exited or self.pidfd is None:
                return self.exited
            pidfd = os.dup(self.pidfd)  # wait() may close the original meanwhile
        try:
            return bool(select.select([pidfd], [], [], timeout)[0])
        finally:
            os.close(pidfd)

    def wait(self, timeout: float | None = None) -> int:
        """The starter's exit status; raises subprocess.TimeoutExpired like Popen.wait.

        A starter that is not our child cannot be waited for: its pidfd says when it has
        gone, and its status is read from its report as the starter's main() sets it
        (0 done, 1 the starter failed, 2 no report: it never ran).
        """
        if self.proc is not None:
            return self.proc.wait(timeout)
        if not self.exited:
            pidfd = self.pidfd
            if pidfd is None:
                raise ValueError("an adopted starter is not our child: watch its report")
            ready, _, _ = select.select([pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired(f"starter {self.pid}", timeout or 0.0)
            with self._pidfd_lock:
                self.exited = True
                self.pidfd = None
                os.close(pidfd)
        try:
            reason = self.report().get("ExitReason")
        except (OSError, ValueError):
            return 2
        return 1 if reason == "starter_failed" else 0

    def report(self) -> dict[str, Any]:
        return read_report(self.spec.report_path)


def _starter_env() -> dict[str, str]:
    return {"PYTHONPATH": PACKAGE_PARENT, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


ZYGOTE_ANSWER_SECONDS = 5.0


class StarterZygote:
    """The daemon's side of execd/starter/zygote.py: ask it to fork a starter.

    Started by start() (the daemon, as it starts serving) or else on first use; until
    it answers, and whenever it is gone, starters are launched cold. Starters it forks
    are its children, not ours: the handle follows them through a pidfd opened before
    the zygote can reap them.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it now if it is not up: the daemon does so when it starts, so that the
        zygote is a part of the EP's fixed cost and the first job's starter is forked."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                if self.proc is not None:
                    self._discard(self.proc)
                self.proc = self._spawn()

    def fork_starter(self, spec_path: str, log_path: str) -> tuple[int, int | None] | None:
        """(pid, pidfd) of a new starter for this spec, or None: launch it cold.

        pidfd None: the starter was forked and has already gone.
        """
        with self.lock:
            proc = self.proc
            if proc is None or proc.poll() is not None:
                if proc is not None:
                    self._discard(proc)
                self.proc = self._spawn()
                return None  # it is still starting up; this job goes cold
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(f"{spec_path}\0{log_path}\n".encode())
                proc.stdin.flush()
                # A zygote that does not answer (starting up takes ~0.1 s) is replaced.
                if select.select([proc.stdout], [], [], ZYGOTE_ANSWER_SECONDS)[0]:
                    answer = proc.stdout.readline()
                else:
                    answer = b""
            except OSError:
                answer = b""
            if not answer.endswith(b"\n"):
                proc.kill()
                answer += proc.stdout.read()  # did it fork before it went? Then that one runs
                self._discard(proc)
                self.proc = self._spawn()
            if not answer.strip().isdigit():
                return None
            pid = int(answer)
            try:
                # The zygote reaps nothing before our next request: the pid is still ours.
                return pid, os.pidfd_open(pid)
            except ProcessLookupError:
                return pid, None

    def close(self) -> None:
        """EOF to the zygote (it exits; its starters carry on), and reap it."""
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None:
            self._discard(proc)

    @staticmethod
    def _discard(proc: subprocess.Popen[bytes]) -> None:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @staticmethod
    def _spawn() -> subprocess.Popen[bytes]:
        with control_signals_blocked():  # its forked starters inherit its mask
            return subprocess.Popen(
                [sys.executable, "-S", "-m", "execd.starter", "--zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=_starter_env(),
                start_new_session=True,
                close_fds=True,
            )


ZYGOTE = StarterZygote()
atexit.register(ZYGOTE.close)


def launch_starter(
    spec: StarterSpec, spec_path: str, log_path: str, *, zygote: bool = True
) -> StarterHandle:
    """Write the spec where the starter will read it and start the starter.

    zygote: fork it from the starter zygote when one is up (else start it cold).
    """
    with open(spec_path, "w") as f:
        json.dump(spec._asdict(), f)
    forked = ZYGOTE.fork_starter(spec_path, log_path) if zygote else None
    if forked is not None:
        pid, pidfd = forked
        handle = StarterHandle(spec, None, pid=pid, pidfd=pidfd)
        handle.exited = pidfd is None
        return handle
    with open(log_path, "ab") as log, control_signals_blocked():
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "execd.starter", spec_path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=_starter_env(),
            start_new_session=True,
            close_fds=True,
        )
    return StarterHandle(spec, proc)
