"""DETECTED_CPUS and DETECTED_CORES.

Logical CPUs are the online ones the process may run on (affinity, then the cpuset of
its cgroup); physical cores are the distinct (package, core) pairs among them. With
COUNT_HYPERTHREAD_CPUS false, DETECTED_CPUS counts cores. A cpu.max quota above us
lowers the count again.
"""

from __future__ import annotations

from dataclasses import dataclass

from execd.machine.cgroup_limits import EnclosingLimits, cpus_from_quota, parse_cpu_list
from execd.machine.reader import HostReader

CPU_SYSFS = "/sys/devices/system/cpu"


@dataclass(frozen=True)
class CpuCount:
    detected_cpus: int
    detected_cores: int


def _online_cpus(reader: HostReader) -> set[int]:
    text = reader.read_text(f"{CPU_SYSFS}/online")
    if text is not None and text.strip():
        try:
            return parse_cpu_list(text)
        except ValueError:
            pass
    # No sysfs (some containers): count processor entries in /proc/cpuinfo.
    cpuinfo = reader.read_text("/proc/cpuinfo") or ""
    ids = [
        int(line.split(":", 1)[1])
        for line in cpuinfo.splitlines()
        if line.startswith("processor") and line.split(":", 1)[1].strip().isdigit()
    ]
    return set(ids) or {0}


def _core_of(reader: HostReader, cpu: int) -> tuple[str, str]:
    topo = f"{CPU_SYSFS}/cpu{cpu}/topology"
    package = (reader.read_text(f"{topo}/physical_package_id") or "").strip()
    core = (reader.read_text(f"{topo}/core_id") or "").strip()
    if not core:
        return (f"cpu{cpu}", "")  # topology unknown: every CPU is its own core
    return (package, core)


def _allowed_from_status(reader: HostReader) -> set[int] | None:
    for line in (reader.read_text("/proc/self/status") or "").splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                return parse_cpu_list(line.split(":", 1)[1])
            except ValueError:
                return None
    return None


def detect_cpus(
    reader: HostReader, limits: EnclosingLimits, *, count_hyperthread_cpus: bool = True
) -> CpuCount:
    usable = _online_cpus(reader)
    affinity = reader.cpu_affinity()
    if affinity is None:
        affinity = _allowed_from_status(reader)
    if affinity:
        usable &= affinity
    if limits.cpuset:
        usable &= set(limits.cpuset)
    if not usable:
        usable = {0}
    cores = len({_core_of(reader, cpu) for cpu in usable})
    logical = len(usable)
    cpus = logical if count_hyperthread_cpus else cores
    if limits.cpu_quota is not None:
        allowed = cpus_from_quota(limits.cpu_quota)
        cpus = min(cpus, allowed)
        cores = min(cores, allowed)
    return CpuCount(detected_cpus=cpus, detected_cores=cores)
