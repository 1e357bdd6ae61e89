"""Limits of the cgroup this process lives in, and of every cgroup above it.

A node that is itself a container or a systemd unit with CPUQuota/MemoryMax must
advertise what it may use, not what the hardware has: the tightest limit on the path
from our cgroup up to the root wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from execd.machine.reader import HostReader


@dataclass(frozen=True)
class EnclosingLimits:
    memory_bytes: int | None = None  # tightest memory.max (v2) or memory.limit_in_bytes (v1)
    cpu_quota: float | None = None  # tightest cpu.max quota/period, in CPUs
    cpuset: frozenset[int] | None = None  # cpuset.cpus.effective of our own cgroup


def parse_cpu_list(text: str) -> set[int]:
    """``0-3,8,10-11`` -> {0,1,2,3,8,10,11}; raises ValueError on garbage."""
    cpus: set[int] = set()
    for raw in text.strip().split(","):
        part = raw.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


def _mount_point(reader: HostReader, fstype: str, option: str | None = None) -> str | None:
    for line in (reader.read_text("/proc/mounts") or "").splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[2] != fstype:
            continue
        if option is None or option in fields[3].split(","):
            return fields[1]
    return None


def _own_paths(reader: HostReader) -> dict[str, str]:
    """Controller (``""`` for v2) -> our cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    for line in (reader.read_text("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            paths[ctrl] = parts[2]
    return paths


def _ancestors(mount: str, path: str) -> list[str]:
    """Directories from our cgroup up to the hierarchy's root, deepest first."""
    parts = [p for p in path.split("/") if p]
    return [mount + "".join("/" + p for p in parts[:i]) for i in range(len(parts), -1, -1)]


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def enclosing_limits(reader: HostReader) -> EnclosingLimits:
    paths = _own_paths(reader)
    memory: float | None = None
    quota: float | None = None
    cpuset: frozenset[int] | None = None
    v2 = _mount_point(reader, "cgroup2")
    if v2 is not None and "" in paths:
        for i, d in enumerate(_ancestors(v2, paths[""])):
            mem = (reader.read_text(d + "/memory.max") or "").strip()
            if mem.isdigit():
                memory = _min(memory, int(mem))
            cpu = (reader.read_text(d + "/cpu.max") or "").split()
            if len(cpu) == 2 and cpu[0].isdigit() and cpu[1].isdigit() and int(cpu[1]) > 0:
                quota = _min(quota, int(cpu[0]) / int(cpu[1]))
            if i == 0:
                text = (reader.read_text(d + "/cpuset.cpus.effective") or "").strip()
                if text:
                    try:
                        cpuset = frozenset(parse_cpu_list(text))
                    except ValueError:
                        cpuset = None
    v1 = _mount_point(reader, "cgroup", "memory")
    if v1 is not None and "memory" in paths:
        for d in _ancestors(v1, paths["memory"]):
            mem = (reader.read_text(d + "/memory.limit_in_bytes") or "").strip()
            # v1 says "no limit" with a huge page-rounded number, not "max"
            if mem.isdigit() and int(mem) < 2**62:
                memory = _min(memory, int(mem))
    return EnclosingLimits(
        memory_bytes=None if memory is None else int(memory),
        cpu_quota=quota,
        cpuset=cpuset,
    )


def cpus_from_quota(quota: float) -> int:
    """CPUs a quota allows: 1.5 CPUs of time is 2 CPUs to schedule on, never 0."""
    return max(1, math.ceil(quota - 1e-9))
