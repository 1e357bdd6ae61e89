"""STARTER_HIDE_GPU_DEVICES in the starter: deny the job the GPUs that are not its own.

Done on the job's slice before the job runs, so nothing the job starts escapes it.
Where it cannot be done (no root, no cgroup BPF, a program above that forbids ours) the
job runs anyway, as under condor_starter, and the report says so (GpuHidingProblem);
the starter logs it and the daemon logs it again when the job ends.
"""

from __future__ import annotations

from pathlib import Path

from execd.errors import CgroupError
from execd.starter.spec import StarterSpec


def hide_gpu_devices(spec: StarterSpec, slice_path: Path) -> dict[str, str]:
    """Attach the deny program to the job's slice; the report's HiddenDevices
    ("195:1,195:2") and/or GpuHidingProblem (why some GPU stays visible)."""
    out: dict[str, str] = {}
    problems = [spec.gpu_hiding_problem] if spec.gpu_hiding_problem else []
    if spec.hide_devices:
        # Imported only where there is something to hide (~2 ms of a cold start).
        from execd.cgroups.devices import deny_devices  # noqa: PLC0415

        devices = ",".join(f"{major}:{minor}" for major, minor in spec.hide_devices)
        try:
            deny_devices(slice_path, [(d[0], d[1]) for d in spec.hide_devices])
        except CgroupError as exc:
            problems.append(f"devices {devices} are not hidden: {exc}")
        else:
            out["HiddenDevices"] = devices
    if problems:
        out["GpuHidingProblem"] = "; ".join(problems)
    return out
