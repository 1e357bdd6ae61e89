"""GPUs through NVML (the nvidia-ml-py ``pynvml`` module).

Ids are HTCondor's short UUIDs, ``GPU-`` and the first 8 hex digits of the device UUID
(``GPU-ed351562``). Properties are those `condor_gpu_discovery -properties` publishes
in each GPU's nested ad (setPropertiesFromBasicProps, without `-extra`), by its names
and in its forms. No driver, no library, or any NVML error means zero GPUs and one log
event saying why, never an exception: a node without GPUs is still a node.

Each GPU's device file is /dev/nvidia<minor>, the minor number NVML reports (else the
driver's /proc/driver/nvidia/gpus/<pci>/information, which condor_starter reads), with
the major number the NVIDIA driver always registers (195, as /dev/nvidiactl's): the
starter hides the GPUs a job was not given by these numbers (STARTER_HIDE_GPU_DEVICES).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from execd.log import get_logger
from execd.machine.facts import GpuInfo
from execd.machine.reader import HostReader

log = get_logger(__name__)

# The character major of /dev/nvidia0-254 and /dev/nvidiactl, fixed by the driver.
NVIDIA_MAJOR = 195
PROC_GPUS = "/proc/driver/nvidia/gpus"


def short_gpu_id(uuid: str) -> str:
    """``GPU-ed351562-b6da-...`` -> ``GPU-ed351562``."""
    body = uuid.removeprefix("GPU-")
    return "GPU-" + body.replace("-", "")[:8]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(fn: Any, *args: Any) -> Any:
    """A property some GPUs or drivers do not support: None instead of an error."""
    try:
        return fn(*args)
    except Exception:  # any NVMLError subclass: NotSupported, NoPermission, ...
        return None


def _device_properties(
    nvml: Any, handle: Any, cuda_driver: int | None, driver: str | None
) -> tuple[str, dict[str, object]]:
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    gpu_id = short_gpu_id(uuid)
    props: dict[str, object] = {"Id": gpu_id, "DeviceUuid": uuid.removeprefix("GPU-")}
    props["DeviceName"] = _text(nvml.nvmlDeviceGetName(handle))
    # "%.0f" of the MiB, as condor_gpu_discovery writes it
    props["GlobalMemoryMb"] = round(int(nvml.nvmlDeviceGetMemoryInfo(handle).total) / 1048576)
    cc = _optional(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    if cc is not None:
        props["Capability"] = float(f"{cc[0]}.{cc[1]}")
    pci = _optional(nvml.nvmlDeviceGetPciInfo, handle)
    if pci is not None:
        props["DevicePciBusId"] = legacy_bus_id(_text(pci.busId))
    ecc = _optional(nvml.nvmlDeviceGetEccMode, handle)
    if ecc is not None:
        props["ECCEnabled"] = bool(ecc[0])
    if driver is not None:
        props["NvidiaDriver"] = driver
    if cuda_driver is not None:
        # condor_gpu_discovery's "%d.%d" of (version / 1000, version % 100)
        props["DriverVersion"] = float(f"{cuda_driver // 1000}.{cuda_driver % 100}")
        props["MaxSupportedVersion"] = int(cuda_driver)
    return gpu_id, props


def legacy_bus_id(bus_id: str) -> str:
    """`00000000:00:06.0` -> `0000:00:06.0` (a 4-digit domain, as CUDA names it)."""
    domain, sep, rest = bus_id.partition(":")
    return f"{domain[-4:]}{sep}{rest}" if sep and len(domain) > 4 else bus_id


def proc_minor_numbers(reader: HostReader) -> dict[str, int]:
    """Full UUID (GPU-...) -> device minor, from the driver's own information files."""
    minors: dict[str, int] = {}
    for pci in reader.listdir(PROC_GPUS):
        text = reader.read_text(f"{PROC_GPUS}/{pci}/information") or ""
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        uuid = fields.get("GPU UUID", "").strip()
        minor = fields.get("Device Minor", "").strip()
        if uuid and minor.isdigit():
            minors[uuid] = int(minor)
    return minors


def with_proc_minors(gpus: Sequence[GpuInfo], reader: HostReader | None) -> list[GpuInfo]:
    """GPUs with no minor number yet (NVML had none, or they came from
    condor_gpu_discovery) get the driver's, matched by DeviceUuid, where it says."""
    if reader is None or all(gpu.device is not None for gpu in gpus):
        return list(gpus)
    minors = proc_minor_numbers(reader)
    filled = []
    for gpu in gpus:
        uuid = str(gpu.properties.get("DeviceUuid", ""))
        minor = minors.get(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        if gpu.device is None and minor is not None:
            filled.append(dataclasses.replace(gpu, device=(NVIDIA_MAJOR, minor)))
        else:
            filled.append(gpu)
    return filled


def detect_gpus(nvml: Any, reader: HostReader | None = None) -> tuple[GpuInfo, ...]:
    """Every GPU NVML reports; () when NVML is missing or fails (logged).

    reader: where the driver's /proc files are read when NVML has no minor number."""
    if nvml is None:
        log.info("gpu_detection_skipped", reason="the pynvml module is not installed")
        return ()
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        log.info("gpu_detection_skipped", reason=f"NVML unavailable: {exc}")
        return ()
    try:
        cuda_driver = _optional(nvml.nvmlSystemGetCudaDriverVersion)
        driver = _optional(nvml.nvmlSystemGetDriverVersion)
        gpus = []
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu_id, props = _device_properties(nvml, handle, cuda_driver,
                                               None if driver is None else _text(driver))
            minor = _optional(nvml.nvmlDeviceGetMinorNumber, handle)
            device = (NVIDIA_MAJOR, int(minor)) if minor is not None else None
            gpus.append(GpuInfo(id=gpu_id, properties=props, device=device))
        return tuple(with_proc_minors(gpus, reader))
    except Exception as exc:
        log.warning("gpu_detection_failed", error=str(exc), error_type=type(exc).__name__)
        return ()
    finally:
        _optional(nvml.nvmlShutdown)
