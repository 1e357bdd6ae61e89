"""A real `execd run` speaks systemd's notify protocol to NOTIFY_SOCKET as the unit wants.

What systemd does with it is tested under a real systemd in tests/vm/test_systemd_service.py;
here the messages themselves, on a datagram socket standing in for systemd's.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import RunningDaemon


class NotifiedDaemon(RunningDaemon):
    def __init__(self, root: Path, notify_path: Path) -> None:
        super().__init__(root, "NUM_CPUS = 1\nMEMORY = 512\n")
        self.notify_path = notify_path

    def env(self) -> dict[str, str]:
        return {**super().env(), "NOTIFY_SOCKET": str(self.notify_path),
                "WATCHDOG_USEC": "2000000"}


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(30)
    yield sock
    sock.close()


def next_message(sock: socket.socket, *, skip_watchdog: bool = True) -> dict[str, str]:
    while True:
        fields = dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())
        if not (skip_watchdog and fields == {"WATCHDOG": "1"}):
            return fields


def test_ready_status_reload_watchdog_and_stopping(notify: socket.socket, tmp_path: Path) -> None:
    node = NotifiedDaemon(tmp_path, tmp_path / "notify")
    node.proc = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "run"],
        env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = next_message(notify)
        assert ready == {"READY": "1", "STATUS": "1 slot, 0 claimed"}
        # READY=1 came after the slots were published: status answers at once
        status = node.execd("status", "-af", "Name")
        assert status.stdout.startswith("slot1@"), status.stderr
        # WATCHDOG_USEC=2 s: pings every second from the event loop
        assert next_message(notify, skip_watchdog=False) == {"WATCHDOG": "1"}

        node.execd("drain", "--reason", "maintenance")
        assert next_message(notify)["STATUS"] == "1 slot, 0 claimed, draining"

        node.send(signal.SIGHUP)
        reloading = next_message(notify)
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        assert next_message(notify) == {"READY": "1", "STATUS": "1 slot, 0 claimed, draining"}

        node.send(signal.SIGTERM)
        assert next_message(notify) == {"STOPPING": "1", "STATUS": "shutting down (graceful)"}
        assert node.proc.wait(timeout=30) == 0
    finally:
        node.stop(signal.SIGQUIT)
