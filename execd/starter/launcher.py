"""The daemon's side of a starter: spawn it, signal it, collect its report.

A starter runs `python -S -m execd.starter SPEC.json` in its own session (it must
outlive the daemon, which later re-adopts it) and writes its report durably to
`report_path` before it exits. Control is by signal (see execd/starter/run.py):

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
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import execd
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import JobCgroup
from execd.starter.report import read_report
from execd.starter.spec import StarterSpec

PACKAGE_PARENT = str(Path(execd.__file__).resolve().parent.parent)


class StarterHandle:
    """One running starter; methods are safe to call after it has exited.

    `proc` is None for a starter re-adopted after a daemon restart (known by pid only).
    """

    def __init__(
        self, spec: StarterSpec, proc: subprocess.Popen[bytes] | None, pid: int | None = None
    ) -> None:
        self.spec = spec
        self.proc = proc
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
        try:
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

    def kill_family(self) -> None:
        """The last resort after KILLING_TIMEOUT: the starter and every job process."""
        self._signal(signal.SIGKILL)
        base = Path(self.spec.cgroup_mount) / self.spec.base_cgroup
        job = JobCgroup(CgroupFS(), base / f"{self.spec.slot_name}.slice", frozenset())
        job.destroy()

    def wait(self, timeout: float | None = None) -> int:
        if self.proc is None:
            raise ValueError("an adopted starter is not our child: watch its report instead")
        return self.proc.wait(timeout)

    def report(self) -> dict[str, Any]:
        return read_report(self.spec.report_path)


def _starter_env() -> dict[str, str]:
    return {"PYTHONPATH": PACKAGE_PARENT, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}


class WarmStarter:
    """One starter started ahead of need: interpreter up, modules imported, waiting.

    Most of a cold launch is Python starting and importing (~40 ms of ~50 here); a warm
    starter has done that before the job arrives. It waits on its stdin for
    `SPEC_PATH NUL LOG_PATH`, then runs exactly as a cold one (same process, same
    session, the daemon's child); EOF (the daemon gone) makes it exit unused.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def take(self, spec_path: str, log_path: str) -> subprocess.Popen[bytes] | None:
        """Hand the spec to the waiting starter (None if there is none) and warm the next."""
        with self.lock:
            proc, self.proc = self.proc, None
            if proc is not None and not self._hand_over(proc, spec_path, log_path):
                proc = None
            self.proc = self._spawn()
        return proc

    def close(self) -> None:
        """EOF to the waiting starter (it exits unused), and reap it."""
        with self.lock:
            proc, self.proc = self.proc, None
        if proc is not None:
            self._discard(proc)

    @staticmethod
    def _discard(proc: subprocess.Popen[bytes]) -> None:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @classmethod
    def _hand_over(cls, proc: subprocess.Popen[bytes], spec_path: str, log_path: str) -> bool:
        if proc.poll() is not None or proc.stdin is None:
            cls._discard(proc)
            return False
        try:
            proc.stdin.write(f"{spec_path}\0{log_path}\n".encode())
            proc.stdin.close()
        except OSError:  # it died while waiting: reap it, launch cold instead
            proc.kill()
            cls._discard(proc)
            return False
        return True

    @staticmethod
    def _spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-S", "-m", "execd.starter", "--warm"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_starter_env(),
            start_new_session=True,
            close_fds=True,
        )


WARM = WarmStarter()
atexit.register(WARM.close)


def launch_starter(
    spec: StarterSpec, spec_path: str, log_path: str, *, warm: bool = True
) -> StarterHandle:
    """Write the spec where the starter will read it and start the starter.

    warm: use the starter started ahead of need, if there is one, and start the next.
    """
    with open(spec_path, "w") as f:
        json.dump(spec._asdict(), f)
    proc = WARM.take(spec_path, log_path) if warm else None
    if proc is not None:
        return StarterHandle(spec, proc)
    with open(log_path, "ab") as log:
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
