"""What the node has: the facts detection produces and slot layout consumes.

Detection (execd.machine.*) fills these from /proc, /sys, statvfs and NVML through an
injectable reader; the slot layout (execd.slots) divides them. Overrides from config
(NUM_CPUS, MEMORY, RESERVED_MEMORY, RESERVED_DISK, ...) are already applied in the
``total_*`` fields; the ``detected_*`` fields are what the hardware said.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execd.machine.cpu_flags import CpuFlags
from execd.machine.reader import Uname


@dataclass(frozen=True)
class GpuInfo:
    """One GPU: its id as HTCondor names it, and its properties for the nested ad."""

    id: str  # short form, e.g. "GPU-6a96bd13"
    properties: dict[str, object] = field(default_factory=dict)  # DeviceName, Capability, ...
    # Its device file's (major, minor): /dev/nvidia<minor> is (195, minor). None: unknown
    # (a GPU named in MACHINE_RESOURCE_GPUs, or NVML without the minor number).
    device: tuple[int, int] | None = None


@dataclass(frozen=True)
class CustomResource:
    """A MACHINE_RESOURCE_<name>: a count, or named instances from an inventory."""

    name: str  # as configured, e.g. "Bar" (slot ads use it as-is: Bar, TotalBar, AssignedBar)
    count: float
    instances: tuple[str, ...] = ()  # ids when the resource is an inventory; else empty
    # The ids came from MACHINE_RESOURCE_INVENTORY_<name>'s output (Detected<name> is
    # that output's id list), not from the config (Detected<name> is their number).
    inventory: bool = False


@dataclass(frozen=True)
class MachineFacts:
    """Static resources of the node, detected then adjusted by configuration."""

    detected_cpus: int  # DETECTED_CPUS (honours COUNT_HYPERTHREAD_CPUS, affinity, cgroup)
    detected_cores: int  # DETECTED_CORES (physical cores)
    detected_memory_mb: int  # DETECTED_MEMORY (lowered to an enclosing memory.max)
    total_cpus: float  # NUM_CPUS override or detected_cpus
    total_memory_mb: int  # MEMORY override or detected, minus RESERVED_MEMORY
    total_disk_kb: int  # free space of EXECUTE minus RESERVED_DISK
    total_vm_kb: int  # physical memory + free swap (TotalVirtualMemory)
    gpus: tuple[GpuInfo, ...] = ()
    gpus_configured: bool = False  # listed in MACHINE_RESOURCE_GPUs: DetectedGPUs = count
    # False: the node has no GPUs resource at all (STARTD_DETECT_GPUS off and no GPU
    # configuration): no GPU attribute in its ads, no GPUs in MachineResources
    gpus_resource: bool = True
    # OFFLINE_MACHINE_RESOURCE_<name>: ids of GPUs or of `custom` instances (still listed
    # there) that no slot gets: resource name -> ids
    offline: dict[str, tuple[str, ...]] = field(default_factory=dict)
    custom: dict[str, CustomResource] = field(default_factory=dict)
    arch: str = "X86_64"
    opsys: str = "LINUX"
    opsys_and_ver: str = ""
    opsys_ver: int = 0
    opsys_name: str = ""
    opsys_long_name: str = ""
    opsys_short_name: str = ""
    opsys_legacy: str = ""
    # /proc/cpuinfo's flags and numbers, and uname(2): None where nothing was detected
    cpu: CpuFlags | None = None
    uname: Uname | None = None
    hostname: str = "localhost"
    execute_dir: str = ""


@dataclass(frozen=True)
class MachineLoad:
    """What changes from poll to poll: load and idle times (seed 000, 3.5.10)."""

    total_load_avg: float = 0.0
    total_condor_load_avg: float = 0.0
    keyboard_idle: int = 0  # seconds since the last keyboard/mouse input
    console_idle: int = 0  # seconds since the last console tty input
