"""`who`: the running jobs, each with its starter, cgroup and what it has used so far."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd.errors import CgroupError

if TYPE_CHECKING:
    from execd.daemon.jobs import JobManager


def running_jobs(jobs: JobManager) -> list[dict[str, Any]]:
    """Running jobs: slot, job, owner, starter pid, cgroup and what it has used."""
    out = []
    for slot, job in jobs.running.items():
        entry: dict[str, Any] = {
            "slot": slot, "job_id": job.job_id, "owner": job.ad.get("Owner"),
            "starter_pid": job.handle.pid if job.handle else None, "started": job.started,
            "suspended": job.suspended is not None}
        if jobs.tree is not None:
            cgroup = jobs.tree.job(slot)
            entry["cgroup"] = str(cgroup.slice)
            try:
                used = cgroup.usage()
            except CgroupError:
                used = None  # not made yet, or already gone
            if used is not None:
                entry.update(cpu_user_s=used.user_usec / 1e6, cpu_sys_s=used.system_usec / 1e6,
                             memory_mb=round(used.memory_bytes / 2**20, 1),
                             processes=used.processes)
        out.append(entry)
    return out
