"""What the starter has measured of its job: the latest sample and the largest values.

Each poll samples the job cgroup's usage (CPU, processes, memory) and block I/O. The
starter reports the latest sample's CPU, and of memory and processes the largest it has
seen, as condor_starter does: VanillaProc keeps the largest resident set (max_rss) and
reports it as ResidentSetSize in every update, not the current one, ProcFamily the
largest image size (ImageSize). How memory is measured: resident_set.py.
"""

from __future__ import annotations

from typing import Any

from execd.cgroups.tree import BlockIO, JobCgroup, Usage
from execd.starter import report as rpt
from execd.starter.resident_set import measure_memory


class JobMeasurements:
    """The job cgroup's latest usage and block I/O, and the largest memory and process
    counts measured so far."""

    def __init__(self, cgroup: JobCgroup, use_peak_memory: bool,
                 ignore_cache_memory: bool) -> None:  # fmt: skip
        self.cgroup = cgroup
        self.use_peak_memory = use_peak_memory
        self.ignore_cache_memory = ignore_cache_memory
        self.last_usage: Usage | None = None
        self.block_io: BlockIO | None = None  # None: no io controller (not measured)
        self.max_resident_bytes = 0  # ResidentSetSize
        self.max_image_bytes = 0  # ImageSize
        self.max_processes = 0

    def sample(self) -> Usage:
        """Measure the job now: its usage (kept as the latest), block I/O and peaks."""
        usage = self.cgroup.usage()
        self.last_usage = usage
        self.block_io = self.cgroup.block_io()
        self._note_memory(usage)
        self.max_processes = max(self.max_processes, usage.processes)
        return usage

    def _note_memory(self, usage: Usage) -> None:
        """Keep the largest resident set and image size (the memory policy, only without
        a memory controller, measures /proc's resident sets)."""
        m = measure_memory(self.cgroup, usage, self.use_peak_memory, self.ignore_cache_memory)
        self.max_resident_bytes = max(self.max_resident_bytes, m.resident_bytes)
        self.max_image_bytes = max(self.max_image_bytes, m.image_bytes)

    def count_processes(self) -> None:
        """A last count of the job's processes, without measuring their memory: reading
        every process's memory (no memory controller) would delay the kill of a fork
        bomb by tens of milliseconds."""
        self.max_processes = max(self.max_processes, len(self.cgroup.pids()))

    def status_attrs(self) -> dict[str, Any]:
        """The measurements in the starter's status (seed 002's STARTER_* and job hooks)."""
        usage = self.last_usage
        return {
            "ImageSize": self.max_image_bytes // 1024,
            "ResidentSetSize": self.max_resident_bytes // 1024,
            "RemoteUserCpu": usage.user_usec / 1e6 if usage else 0.0,
            "RemoteSysCpu": usage.system_usec / 1e6 if usage else 0.0,
            "NumProcesses": usage.processes if usage else 0,
            **rpt.block_io_attrs(self.block_io),
        }

    def report_attrs(self, usage: Usage) -> dict[str, Any]:
        """The measurements in the final report: `usage`'s CPU (the last), the peaks."""
        rss_kb = self.max_resident_bytes // 1024
        return {
            "RemoteUserCpu": usage.user_usec / 1e6,
            "RemoteSysCpu": usage.system_usec / 1e6,
            "ResidentSetSize": rss_kb,
            "ImageSize": self.max_image_bytes // 1024,
            "MemoryUsage": (rss_kb + 1023) // 1024,  # condor's MEMORY_USAGE_METRIC
            "NumProcesses": self.max_processes,
        }
