"""Which GPU device files a job must not open (STARTER_HIDE_GPU_DEVICES).

Derived as condor_starter derives its exclude list (nvidia_env_var_to_exclude_list):
every NVIDIA GPU of the node that is not one of the slot's, by its /dev/nvidia<minor>
device number, so a job given no GPU can open none. A slot naming a GPU the node does
not know hides nothing, as HTCondor skips hiding on an unknown GPU; a GPU whose device
number is unknown (named in MACHINE_RESOURCE_GPUs rather than detected through NVML)
cannot be hidden. Either is said in `problem`, which the starter logs and reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from execd.machine.facts import GpuInfo


class GpuHiding(NamedTuple):
    devices: tuple[tuple[int, int], ...] = ()  # (major, minor) of each device to deny
    problem: str | None = None  # why a GPU the job was not given stays visible


def gpus_to_hide(node_gpus: Sequence[GpuInfo], assigned: Sequence[str]) -> GpuHiding:
    """The devices of the node's GPUs not in `assigned` (the slot's AssignedGPUs ids)."""
    known = {gpu.id for gpu in node_gpus}
    unknown = [gpu_id for gpu_id in assigned if gpu_id not in known]
    if unknown:
        return GpuHiding(problem=f"the slot's GPU {unknown[0]} is not one this node "
                                 "detected, so no GPU is hidden from the job")
    others = [gpu for gpu in node_gpus if gpu.id not in assigned]
    devices = tuple(dict.fromkeys(gpu.device for gpu in others if gpu.device is not None))
    unhidden = [gpu.id for gpu in others if gpu.device is None]
    problem = None
    if unhidden:
        problem = (f"no device file is known for {', '.join(unhidden)} (not detected "
                   "through NVML), so the job can still open it")
    return GpuHiding(devices, problem)
