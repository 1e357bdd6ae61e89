"""The one seam through which detection sees the host: /proc, /sys, statvfs, NVML.

Detection functions take a :class:`HostReader` and never touch the OS themselves, so
every one of them runs on recorded inputs (tests/fixtures) as well as on the live host.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Uname:
    """uname(2): what the kernel says of itself and of this node (its UTS namespace)."""

    sysname: str
    nodename: str
    release: str
    version: str
    machine: str


# What a recorded node reports unless its test says otherwise.
FIXTURE_UNAME = Uname("Linux", "fixture-node", "6.1.0-fixture", "#1 SMP PREEMPT_DYNAMIC", "x86_64")


class HostReader(Protocol):
    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""

    def listdir(self, path: str) -> list[str]:
        """Entry names of a directory; [] when it does not exist."""

    def free_disk_kb(self, path: str) -> int | None:
        """Space available to unprivileged users on ``path``'s filesystem; None if absent."""

    def access_time(self, path: str) -> float | None:
        """A file's atime (wall clock seconds), None when it does not exist."""

    def cpu_affinity(self) -> set[int] | None:
        """The CPUs this process may run on, None when unknown."""

    def nvml(self) -> Any:
        """The NVML module (pynvml's API surface), or None when it cannot be imported."""

    def run_command(self, argv: list[str], timeout: float) -> CommandResult:
        """Run a command (for MACHINE_RESOURCE_INVENTORY_<name>)."""

    def now(self) -> float:
        """Wall clock time."""

    def uname(self) -> Uname:
        """The kernel's uname(2)."""


class LiveHostReader:
    """The real host."""

    def read_text(self, path: str) -> str | None:
        try:
            return Path(path).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def free_disk_kb(self, path: str) -> int | None:
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize // 1024

    def access_time(self, path: str) -> float | None:
        try:
            return os.stat(path).st_atime
        except OSError:
            return None

    def cpu_affinity(self) -> set[int] | None:
        try:
            return set(os.sched_getaffinity(0))
        except OSError:
            return None

    def nvml(self) -> Any:
        try:
            import pynvml  # noqa: PLC0415  (only hosts that look for GPUs pay for it)
        except ImportError:
            return None
        return pynvml

    def run_command(self, argv: list[str], timeout: float) -> CommandResult:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        except PermissionError:
            return CommandResult(126, "", f"{argv[0]}: permission denied")
        except subprocess.TimeoutExpired:
            return CommandResult(124, "", f"{argv[0]}: timed out after {timeout}s")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def now(self) -> float:
        return time.time()

    def uname(self) -> Uname:
        u = os.uname()
        return Uname(u.sysname, u.nodename, u.release, u.version, u.machine)


def _proc_name(path: str) -> str | None:
    if path.startswith("/proc/self/"):
        return "proc/self_" + path.removeprefix("/proc/self/")
    if path.startswith("/proc/"):
        return "proc/" + path.removeprefix("/proc/")
    return None


class FixtureHostReader:
    """A host recorded as files (tests/fixtures/<node>/, layout in its README).

    /proc/X -> proc/X, /proc/self/X -> proc/self_X, /sys/devices/system/cpu/X -> sys/cpu/X,
    and the cgroup v2 mount named in proc/mounts -> sys/cgroup/. Free disk comes from
    proc/df_tmp.txt for any path unless ``missing_paths`` names it; NVML is whatever object
    the test passes (a fake built from nvml/pynvml.json, or None for "not importable");
    uname is the test's (the recordings hold none: FIXTURE_UNAME unless it says).
    """

    def __init__(
        self,
        root: str | Path,
        *,
        nvml: Any = None,
        affinity: set[int] | None = None,
        commands: dict[str, CommandResult] | None = None,
        atimes: dict[str, float] | None = None,
        now: float = 1_800_000_000.0,
        missing_paths: tuple[str, ...] = (),
        uname: Uname = FIXTURE_UNAME,
    ) -> None:
        self.root = Path(root)
        self._nvml = nvml
        self._affinity = affinity
        self._commands = commands or {}
        self._atimes = atimes or {}
        self._now = now
        self._missing = missing_paths
        self._uname = uname
        self._cgroup_mount = self._find_cgroup2_mount()

    def _find_cgroup2_mount(self) -> str | None:
        path = self.root / "proc/mounts"
        mounts = path.read_text() if path.exists() else ""
        for line in mounts.splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[2] == "cgroup2":
                return fields[1]
        return None

    def _map(self, path: str) -> Path | None:
        rel = _proc_name(path)
        if rel is None and path.startswith("/sys/devices/system/cpu/"):
            rel = "sys/cpu/" + path.removeprefix("/sys/devices/system/cpu/")
        if rel is None and self._cgroup_mount and path.startswith(self._cgroup_mount + "/"):
            rel = "sys/cgroup/" + path.removeprefix(self._cgroup_mount + "/")
        if rel is None and path.startswith("/etc/"):
            rel = "etc/" + path.removeprefix("/etc/")
        return None if rel is None else self.root / rel

    def read_text(self, path: str) -> str | None:
        mapped = self._map(path)
        if mapped is None or not mapped.is_file():
            return None
        return mapped.read_text()

    def listdir(self, path: str) -> list[str]:
        mapped = self._map(path.rstrip("/") + "/")
        if mapped is None or not mapped.is_dir():
            return []
        return sorted(p.name for p in mapped.iterdir())

    def free_disk_kb(self, path: str) -> int | None:
        if any(path == m or path.startswith(m + "/") for m in self._missing):
            return None
        text = self.read_text("/proc/df_tmp.txt")
        if text is None:
            return None
        fields = text.splitlines()[1].split()
        return int(fields[3])

    def access_time(self, path: str) -> float | None:
        return self._atimes.get(path)

    def cpu_affinity(self) -> set[int] | None:
        return self._affinity

    def nvml(self) -> Any:
        return self._nvml

    def run_command(self, argv: list[str], timeout: float) -> CommandResult:
        return self._commands.get(argv[0], CommandResult(127, "", f"{argv[0]}: command not found"))

    def now(self) -> float:
        return self._now

    def uname(self) -> Uname:
        return self._uname
