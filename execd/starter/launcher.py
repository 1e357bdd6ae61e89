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

import json
import os
import signal
import subprocess
import sys
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


def launch_starter(spec: StarterSpec, spec_path: str, log_path: str) -> StarterHandle:
    """Write the spec where the starter will read it and start the starter."""
    with open(spec_path, "w") as f:
        json.dump(spec._asdict(), f)
    env = {"PYTHONPATH": PACKAGE_PARENT, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-S", "-m", "execd.starter", spec_path],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    return StarterHandle(spec, proc)
