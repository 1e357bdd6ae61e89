"""systemd's notify protocol (sd_notify), spoken directly over $NOTIFY_SOCKET.

Under `Type=notify` the daemon says READY=1 once its slots are published,
RELOADING=1 (with MONOTONIC_USEC) then READY=1 around a reload, STOPPING=1 when it
begins to shut down, WATCHDOG=1 on every watchdog tick, and STATUS= lines a person
sees in `systemctl status`. Outside systemd every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping


class Notifier:
    """Sends notify messages; silent when there is no NOTIFY_SOCKET."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        self._address: str | None = None
        if address:
            # An address starting with '@' is in the abstract namespace.
            self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        for_us = not pid or pid == str(os.getpid())
        self.watchdog_usec = int(usec) if usec.isdigit() and for_us else 0

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half the configured timeout), if any."""
        return self.watchdog_usec / 2_000_000 if self.watchdog_usec else None

    def send(self, **fields: str | int) -> bool:
        """Send KEY=value lines; returns whether a message was sent."""
        if self._address is None:
            return False
        message = "\n".join(f"{key.upper()}={value}" for key, value in fields.items())
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(self._address)
            sock.sendall(message.encode())
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send(ready=1, **({"status": status} if status else {}))

    def reloading(self) -> bool:
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send(reloading=1, monotonic_usec=usec)

    def stopping(self, status: str | None = None) -> bool:
        return self.send(stopping=1, **({"status": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.send(status=text)

    def watchdog(self) -> bool:
        return self.send(watchdog=1)


def status_text(states: list[str], *, draining: bool, stopping: str | None) -> str:
    """The STATUS= line from the slots' states: "4 slots, 2 claimed, draining"."""
    count = len(states)
    parts = [f"{count} slot{'' if count == 1 else 's'}", f"{states.count('Claimed')} claimed"]
    if draining:
        parts.append("draining")
    if stopping is not None:
        parts.append(f"shutting down ({stopping})")
    return ", ".join(parts)
