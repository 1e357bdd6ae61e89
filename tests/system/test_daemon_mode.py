"""`execd run --daemon` (python-daemon) as a real process: detach, pidfile, refuse, stop."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import RunningDaemon


@pytest.fixture
def node(tmp_path: Path) -> Iterator[RunningDaemon]:
    tmp_path.chmod(0o755)
    daemon = RunningDaemon(tmp_path, f"RUN = {tmp_path}/run\n")
    yield daemon
    pidfile = daemon.root / "run" / "execd.pid"
    if pidfile.exists():  # a failed test leaves its daemon behind: end it
        pid = int(pidfile.read_text())
        os.kill(pid, signal.SIGKILL)
        wait_exit(pid)
    daemon.remove_cgroup()


def wait_exit(pid: int, timeout: float = 30) -> bool:
    """Wait for a process that is not our child to end (its pidfd turns readable)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout)
        return bool(readable)
    finally:
        os.close(fd)


def run_daemon(node: RunningDaemon, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "execd", "--config", str(node.config), "run", *extra]
    return subprocess.run(argv, env=node.env(), capture_output=True, text=True, timeout=60,
                          check=False)


def session_of(pid: int) -> int:
    # /proc/PID/stat: "pid (comm) state ppid pgrp session ..."; comm may hold spaces
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[3])


def test_daemon_mode_detaches_writes_pidfile_refuses_twice_and_stops(
    node: RunningDaemon,
) -> None:
    pidfile = node.root / "run" / "execd.pid"
    started = run_daemon(node, "--daemon")
    # the command returns once the daemon detached; the daemon goes on without it
    assert started.returncode == 0, started.stderr
    started_event = node.wait_for("execd_started")
    pid = int(pidfile.read_text())
    assert Path(f"/proc/{pid}").exists()
    assert session_of(pid) != os.getsid(0)  # detached: a session of its own
    status = node.execd("status", "-af", "Name")
    assert status.returncode == 0 and status.stdout.startswith("slot1@"), status.stderr
    assert started_event["slots"] == ["slot1"]

    # a second daemon (detached or not) is refused, names the first, exits non-zero
    for extra in (("--daemon",), ()):
        second = run_daemon(node, *extra)
        assert second.returncode == 3, second
        assert f"execd is already running (pid {pid}, pidfile {pidfile})" in second.stderr
    assert int(pidfile.read_text()) == pid  # the refused start left it alone

    os.kill(pid, signal.SIGTERM)
    assert wait_exit(pid), "the daemon did not exit on SIGTERM"
    assert not pidfile.exists()
    assert node.wait_for("execd_stopped")["how"] == "graceful"
