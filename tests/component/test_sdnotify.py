"""execd speaks systemd's notify protocol on a real datagram socket."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.daemon.sdnotify import Notifier


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_ready_with_status(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    assert Notifier({"NOTIFY_SOCKET": path}).ready("1 slot, 0 claimed")
    assert sock.recv(4096).decode().splitlines() == ["READY=1", "STATUS=1 slot, 0 claimed"]


def test_reloading_carries_monotonic_usec(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    Notifier({"NOTIFY_SOCKET": path}).reloading()
    lines = sock.recv(4096).decode().splitlines()
    assert lines[0] == "RELOADING=1"
    key, value = lines[1].split("=")
    assert key == "MONOTONIC_USEC"
    assert int(value) > 0


def test_stopping_and_watchdog(notify_socket: tuple[socket.socket, str]) -> None:
    sock, path = notify_socket
    notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "10000000"})
    assert notifier.watchdog_interval() == 5.0
    notifier.watchdog()
    notifier.stopping()
    assert sock.recv(4096) == b"WATCHDOG=1"
    assert sock.recv(4096) == b"STOPPING=1"


def test_without_systemd_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled
    assert not notifier.ready()
    assert notifier.watchdog_interval() is None


def test_watchdog_for_another_pid_is_ignored() -> None:
    assert Notifier({"WATCHDOG_USEC": "1000", "WATCHDOG_PID": "1"}).watchdog_interval() is None
