"""DETECTED_MEMORY (MB) and virtual memory (KB)."""

from __future__ import annotations

from execd.errors import ResourceError
from execd.machine.cgroup_limits import EnclosingLimits
from execd.machine.reader import HostReader

MIB = 1024 * 1024


def _meminfo_kb(reader: HostReader, key: str) -> int | None:
    for line in (reader.read_text("/proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            fields = rest.split()
            if fields and fields[0].isdigit():
                return int(fields[0])
    return None


def detect_memory_mb(reader: HostReader, limits: EnclosingLimits) -> int:
    """Physical memory in MB, lowered to an enclosing cgroup's memory limit."""
    total_kb = _meminfo_kb(reader, "MemTotal")
    if total_kb is None:
        raise ResourceError("cannot read MemTotal from /proc/meminfo")
    mb = total_kb // 1024
    if limits.memory_bytes is not None:
        mb = min(mb, limits.memory_bytes // MIB)
    return mb


INT_MAX = 2**31 - 1


def detect_virtual_memory_kb(reader: HostReader) -> int:
    """VirtualMemory in KB as condor_startd counts it: physical memory and free swap
    together (sysinfo's totalram + freeswap, i.e. MemTotal + SwapFree), capped as
    HTCondor caps it at the largest C int; 0 when /proc/meminfo says neither."""
    ram, swap = _meminfo_kb(reader, "MemTotal"), _meminfo_kb(reader, "SwapFree")
    return min((ram or 0) + (swap or 0), INT_MAX)


def total_memory_mb(detected_mb: int, *, memory_override: int | None, reserved_mb: int) -> int:
    """MEMORY overrides the detected amount; RESERVED_MEMORY is kept for the OS."""
    base = detected_mb if memory_override is None else memory_override
    total = base - reserved_mb
    if total <= 0:
        raise ResourceError(
            f"RESERVED_MEMORY = {reserved_mb} MB leaves no memory for slots "
            f"(the node has {base} MB)"
        )
    return total
