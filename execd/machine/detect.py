"""detect_machine: every detector run once, config overrides applied -> MachineFacts.

Parameters are plain values (not the config object) so detection stays independent of
the config language; execd.slots.from_config turns a Config into DetectionParams.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execd.errors import ResourceError
from execd.log import get_logger
from execd.machine.cgroup_limits import enclosing_limits
from execd.machine.cpu_flags import detect_cpu_flags
from execd.machine.cpus import detect_cpus
from execd.machine.custom import (
    InventoryNotInstalledError,
    detected,
    inventory_output,
    parse_machine_resource,
    run_inventory,
)
from execd.machine.disk import detect_disk_kb
from execd.machine.facts import CustomResource, GpuInfo, MachineFacts
from execd.machine.gpu_inventory import parse_gpu_inventory
from execd.machine.gpus import detect_gpus, with_proc_minors
from execd.machine.hostname import local_fqdn
from execd.machine.memory import detect_memory_mb, detect_virtual_memory_kb, total_memory_mb
from execd.machine.os_info import detect_os
from execd.machine.reader import HostReader

log = get_logger(__name__)

# `$(LIBEXEC)/condor_gpu_discovery $(STARTD_DETECT_GPUS)` with the knobs' defaults
# (STARTD_DETECT_GPUS = -properties $(GPU_DISCOVERY_EXTRA), which is unset)
DEFAULT_LIBEXEC = "/usr/libexec"
DEFAULT_DETECT_GPUS = "-properties"
DEFAULT_GPU_DISCOVERY = f"{DEFAULT_LIBEXEC}/condor_gpu_discovery {DEFAULT_DETECT_GPUS}"


def inventory_gpus(reader: HostReader, command: str,
                   source: str | None = None) -> tuple[GpuInfo, ...] | float:
    """The GPUs condor_gpu_discovery finds (MACHINE_RESOURCE_INVENTORY_GPUs, or
    `source`: STARTD_DETECT_GPUS's command); where its program is not installed (execd
    without HTCondor), NVML's GPUs instead. A number: that many GPUs without ids (an
    inventory that says `DetectedGPUs=2`; condor_gpu_discovery's `DetectedGPUs=0` is no
    GPU). A configured inventory that fails is a ResourceError; the default discovery
    that fails is logged and finds no GPU, as condor_startd counts it (0)."""
    try:
        output = inventory_output(reader, "GPUs", command, source)
    except InventoryNotInstalledError as exc:
        log.info("gpu_inventory_not_installed", why=str(exc), instead="NVML")
        return detect_gpus(reader.nvml(), reader)
    except ResourceError as exc:
        if source is None:
            raise
        log.warning("gpu_discovery_failed", why=str(exc), effect="no GPUs")
        return 0
    count = detected("GPUs", output)
    if not isinstance(count, tuple) and count > 0:
        return count
    # condor_gpu_discovery names no device file: the driver's /proc says, by DeviceUuid
    # (as condor_starter finds what to hide), so that these GPUs can be hidden too.
    return tuple(with_proc_minors(parse_gpu_inventory(output), reader))


def offline_ids(wanted: dict[str, tuple[str, ...]], gpus: tuple[GpuInfo, ...],
                custom: dict[str, CustomResource]) -> dict[str, tuple[str, ...]]:  # fmt: skip
    """OFFLINE_MACHINE_RESOURCE_<name>'s ids that the resource has, in its order, by the
    resource's name; as condor_startd, ids it does not have are ignored."""
    found: dict[str, tuple[str, ...]] = {}
    resources = {"gpus": ("GPUs", [g.id for g in gpus])}
    resources.update({n.lower(): (n, list(r.instances)) for n, r in custom.items()})
    for key, ids in wanted.items():
        name, have = resources.get(key.lower(), ("", []))
        gone = tuple(i for i in have if i in ids)
        if gone:
            found[name] = gone
            log.info("resource_offline", resource=name, ids=list(gone))
    return found


@dataclass(frozen=True)
class DetectionParams:
    execute_dir: str = "/var/lib/execd/execute"
    num_cpus: float | None = None  # NUM_CPUS
    memory_mb: int | None = None  # MEMORY
    reserved_memory_mb: int = 0  # RESERVED_MEMORY
    reserved_disk_mb: int = 0  # RESERVED_DISK
    count_hyperthread_cpus: bool = True
    # STARTD_DETECT_GPUS: the condor_gpu_discovery command run where no GPUs resource is
    # configured; None: no GPU discovery, and no GPUs resource at all
    gpu_discovery: str | None = DEFAULT_GPU_DISCOVERY
    machine_resources: dict[str, str] = field(default_factory=dict)  # name -> value
    machine_inventories: dict[str, str] = field(default_factory=dict)  # name -> command
    # OFFLINE_MACHINE_RESOURCE_<name>: lower-case name -> ids
    offline: dict[str, tuple[str, ...]] = field(default_factory=dict)
    hostname: str | None = None
    arch: str | None = None  # uname's machine, unless a test says otherwise


def detect_machine(reader: HostReader, params: DetectionParams) -> MachineFacts:
    """Raises ResourceError when a resource cannot be determined (named in the message)."""
    limits = enclosing_limits(reader)
    cpus = detect_cpus(reader, limits, count_hyperthread_cpus=params.count_hyperthread_cpus)
    detected_mb = detect_memory_mb(reader, limits)
    custom: dict[str, CustomResource] = {}
    for name, value in params.machine_resources.items():
        custom[name] = parse_machine_resource(name, value)
    gpu_inventory: str | None = None
    for name, command in params.machine_inventories.items():
        if name.lower() == "gpus":
            gpu_inventory = command
            continue
        custom[name] = run_inventory(reader, name, command)
    # MACHINE_RESOURCE_GPUs = id, id... (or 0) replaces detection, as in HTCondor an
    # explicit GPUs resource replaces condor_gpu_discovery's
    configured = next((n for n in custom if n.lower() == "gpus"), None)
    gpus: tuple[GpuInfo, ...] | float = ()
    gpus_configured = False
    if configured is not None:
        if custom[configured].instances or custom[configured].count == 0:
            gpus = tuple(GpuInfo(id=i) for i in custom.pop(configured).instances)
            gpus_configured = True
    elif gpu_inventory is not None:
        gpus = inventory_gpus(reader, gpu_inventory)
    elif params.gpu_discovery is not None:  # condor_startd's STARTD_DETECT_GPUS
        gpus = inventory_gpus(reader, params.gpu_discovery, "STARTD_DETECT_GPUS")
    if not isinstance(gpus, tuple):  # counted, without ids: as MACHINE_RESOURCE_GPUs = N
        custom["GPUs"] = CustomResource(name="GPUs", count=gpus)
        gpus = ()
    # No GPUs resource at all (not even GPUs = 0): nothing configured, discovery off
    gpus_resource = bool(configured or gpu_inventory or params.gpu_discovery)
    offline = offline_ids(params.offline, gpus, custom)
    uname = reader.uname()
    osinfo = detect_os(reader, params.arch)
    return MachineFacts(
        detected_cpus=cpus.detected_cpus,
        detected_cores=cpus.detected_cores,
        detected_memory_mb=detected_mb,
        total_cpus=params.num_cpus if params.num_cpus is not None else cpus.detected_cpus,
        total_memory_mb=total_memory_mb(
            detected_mb, memory_override=params.memory_mb, reserved_mb=params.reserved_memory_mb
        ),
        total_disk_kb=detect_disk_kb(
            reader, params.execute_dir, reserved_disk_mb=params.reserved_disk_mb
        ),
        total_vm_kb=detect_virtual_memory_kb(reader),
        gpus=gpus,
        gpus_configured=gpus_configured,
        gpus_resource=gpus_resource,
        offline=offline,
        custom=custom,
        arch=osinfo.arch,
        opsys=osinfo.opsys,
        opsys_and_ver=osinfo.opsys_and_ver,
        opsys_ver=osinfo.opsys_ver,
        opsys_name=osinfo.opsys_name,
        opsys_long_name=osinfo.opsys_long_name,
        opsys_short_name=osinfo.opsys_short_name,
        opsys_legacy=osinfo.opsys_legacy,
        cpu=detect_cpu_flags(reader, uname.machine),
        uname=uname,
        hostname=params.hostname or local_fqdn(),
        execute_dir=params.execute_dir,
    )
