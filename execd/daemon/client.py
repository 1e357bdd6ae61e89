"""A client for the control socket (used by the `execd` subcommands)."""

from __future__ import annotations

import itertools
import json
import socket
import time
from pathlib import Path
from typing import Any

from execd.daemon.control import ControlError

_ids = itertools.count(1)


class DaemonUnavailableError(ControlError):
    """No daemon answers on the socket."""


class ControlClient:
    def __init__(self, path: Path, timeout: float | None = 30.0) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buffer = b""

    def __enter__(self) -> ControlClient:
        self.connect()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            sock.close()
            raise DaemonUnavailableError(
                "no_daemon", f"execd is not running (no answer on {self.path}: {exc.strerror})"
            ) from None
        self._sock = sock

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def call(self, verb: str, args: dict[str, Any] | None = None) -> Any:
        """Send one request, return its result; an error reply raises ControlError."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        request_id = next(_ids)
        line = json.dumps({"id": request_id, "verb": verb, "args": args or {}}) + "\n"
        self._sock.sendall(line.encode())
        reply = self._read_reply()
        if not reply.get("ok"):
            error = reply.get("error") or {}
            raise ControlError(str(error.get("code", "error")), str(error.get("message", "")))
        return reply.get("result")

    def _read_reply(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buffer:
            chunk = self._sock.recv(65536)
            if not chunk:
                raise ControlError("closed", "execd closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        return reply


def wait_for_daemon(path: Path, timeout: float, *, not_started_at: float | None = None) -> Any:
    """Ping until a daemon answers (one started after `not_started_at`, if given).

    For clients that outlive a daemon restart: the socket is gone (or refuses) while the
    new daemon starts, and no event tells a client when it is back, so this retries.
    Raises DaemonUnavailableError when none answers within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            with ControlClient(path, timeout=5.0) as client:
                ping = client.call("ping")
            if not_started_at is None or ping.get("started") != not_started_at:
                return ping
        except (ControlError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise DaemonUnavailableError(
                "no_daemon", f"execd did not come back on {path} within {timeout:g}s")
        time.sleep(0.1)
