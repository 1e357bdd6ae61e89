"""The starter's exit report and status: HTCondor's attribute names, written durably."""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from execd.cgroups.tree import BlockIO

# HTCondor's hold code for "job exceeded a resource limit" (JobOutOfResources) and the
# subcode it gives the cgroup memory limit.
HOLD_OUT_OF_RESOURCES = 34
HOLD_SUBCODE_MEMORY = 102
# HTCondor's hold code for "failed to create the job's process".
HOLD_FAILED_TO_CREATE_PROCESS = 6


# condor_starter's block I/O counters (VanillaProc::PublishUpdateAd)
BLOCK_IO_ATTRS = ("BlockReadKbytes", "BlockWriteKbytes", "BlockReads", "BlockWrites")


def block_io_attrs(block_io: BlockIO | None) -> dict[str, int]:
    """condor_starter's Block* attributes (BLOCK_IO_ATTRS): KiB rounded down, and
    operations; none where the job's I/O is not measured."""
    if block_io is None:
        return {}
    values = (block_io.read_bytes // 1024, block_io.write_bytes // 1024,
              block_io.reads, block_io.writes)  # fmt: skip
    return dict(zip(BLOCK_IO_ATTRS, values, strict=True))


def memory_hold_reason(limit_mb: int, usage_mb: int) -> str:
    """HTCondor's starter's words (vanilla_proc.cpp), two spaces before "Consider"
    included: the user sees them in the hold reason and the user log."""
    return (
        f"Job has gone over cgroup memory limit of {limit_mb} megabytes. "
        f"Last measured usage: {usage_mb} megabytes.  "
        "Consider resubmitting with a higher request_memory."
    )


# With STARTER_ALWAYS_HOLD_ON_OOM false, an OOM kill while usage was under this share of
# the limit is blamed on the machine (evict and retry), not on the job (hold).
OOM_EVICT_FRACTION = 0.9


def oom_outcome(
    events: dict[str, int], limit_mb: int, used_mb: int, always_hold: bool
) -> str | None:
    """None (no OOM kill), "hold" or "evict" from memory.events counters."""
    if not (events.get("oom_kill") or events.get("oom_group_kill")):
        return None
    if not always_hold and used_mb < OOM_EVICT_FRACTION * limit_mb:
        return "evict"
    return "hold"


def write_durably(path: str, report: dict[str, Any]) -> None:
    """Temp file, fsync, rename, fsync the directory: a crash leaves old or new, never half."""
    tmp = f"{path}.tmp.{os.getpid()}"
    data = json.dumps(report, sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_status(path: str, status: dict[str, Any]) -> None:
    """Replace the status file atomically (no fsync: the next poll rewrites it)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(status, f, sort_keys=True)
    os.rename(tmp, path)


def read_report(path: str) -> dict[str, Any]:
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    return data


def whole_seconds(cpu_s: float) -> float:
    """CPU time as condor_starter reports it: its ProcFamilyUsage counts whole seconds
    (cgroup v2's usage_usec / 1000000, ProcAPI's rusage seconds), truncated, and its
    update assigns them as a real (2.0), for its shadow, its startd and its job hooks
    alike; the starter's status keeps the fraction (for CPUsUsage)."""
    return float(math.floor(float(cpu_s)))
