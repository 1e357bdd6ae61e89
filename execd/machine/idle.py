"""KeyboardIdle and ConsoleIdle: seconds since the last input, from device atimes.

A terminal's atime moves when someone types into it. ConsoleIdle looks at the console
devices (CONSOLE_DEVICES, e.g. ``mouse, console``, plus input event devices); KeyboardIdle
also counts every tty and pseudo-terminal, so it is never larger than ConsoleIdle. A
node with no such device reports idle since ``since`` (the daemon's start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from execd.machine.reader import HostReader

DEFAULT_CONSOLE_DEVICES = ("mouse", "console")


@dataclass(frozen=True)
class IdleTimes:
    keyboard_idle: int
    console_idle: int


def _latest(reader: HostReader, paths: Sequence[str]) -> float | None:
    times = [t for t in (reader.access_time(p) for p in paths) if t is not None]
    return max(times) if times else None


def console_paths(reader: HostReader, console_devices: Sequence[str]) -> list[str]:
    paths = [d if d.startswith("/") else f"/dev/{d}" for d in console_devices]
    inputs = reader.listdir("/dev/input")
    paths += [f"/dev/input/{n}" for n in inputs if n.startswith(("event", "mice", "mouse"))]
    return paths


def tty_paths(reader: HostReader) -> list[str]:
    ttys = [f"/dev/{n}" for n in reader.listdir("/dev") if n.startswith("tty") and n[3:].isdigit()]
    ttys += [f"/dev/pts/{n}" for n in reader.listdir("/dev/pts") if n.isdigit()]
    return ttys


def detect_idle(
    reader: HostReader,
    *,
    since: float,
    console_devices: Sequence[str] = DEFAULT_CONSOLE_DEVICES,
) -> IdleTimes:
    now = reader.now()
    console = _latest(reader, console_paths(reader, console_devices))
    keyboard = _latest(reader, tty_paths(reader))
    last_console = since if console is None else max(console, 0.0)
    last_keyboard = max(last_console, keyboard if keyboard is not None else last_console)
    return IdleTimes(
        keyboard_idle=max(0, int(now - last_keyboard)),
        console_idle=max(0, int(now - last_console)),
    )
