"""A job's resident set and image size as condor_starter 25.x measures them on cgroup v2
(ProcFamilyDirectCgroupV2::get_usage), from the job cgroup's files.

The resident set is memory.stat's anon + shmem: memory.current and memory.peak count
the page cache of every file the job read or wrote and kernel memory, which condor does
not report. With CGROUP_USE_PEAK_MEMORY (default false) memory.peak is the measure,
less memory.stat's file + inactive_anon while CGROUP_IGNORE_CACHE_MEMORY (default
true). The image size is the larger of the peak and the resident set; the starter keeps
the largest of each it has seen (ResidentSetSize, ImageSize). Without the memory
controller (hybrid hosts) both are the processes' resident sets from /proc, where
condor's procd reports their virtual sizes as the image size (docs/pool.md). Without
memory.peak (kernels before 5.19) CGROUP_USE_PEAK_MEMORY measures the resident set;
condor's code reports 0.
"""

from __future__ import annotations

from typing import NamedTuple

from execd.cgroups.tree import JobCgroup, Usage


class MemoryMeasure(NamedTuple):
    resident_bytes: int  # this measurement's resident set (ResidentSetSize's source)
    image_bytes: int  # this measurement's image size (ImageSize's source)


def measure_memory(
    cgroup: JobCgroup, usage: Usage, use_peak: bool, ignore_cache: bool
) -> MemoryMeasure:
    resident = usage.resident_bytes
    # no memory.peak (no memory controller, or a kernel before 5.19): the resident set
    peak = (cgroup.memory_peak() if use_peak else None) or 0
    if peak and ignore_cache:
        stat = cgroup.memory_stat()
        cache = stat.get("file", 0) + stat.get("inactive_anon", 0)
        if peak > cache:
            peak -= cache
        resident = peak
    return MemoryMeasure(resident, max(peak, resident))
