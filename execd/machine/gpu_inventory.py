"""GPUs from MACHINE_RESOURCE_INVENTORY_GPUs: `condor_gpu_discovery -properties`'s output.

`use feature : GPUs` runs `$(LIBEXEC)/condor_gpu_discovery -properties
$(GPU_DISCOVERY_EXTRA)`, whose output is a ClassAd:

    DetectedGPUs="GPU-a0223334, GPU-b1223334"
    Common=[ Capability=7.0; DeviceName="Tesla V100-PCIE-16GB"; GlobalMemoryMb=24220; ]
    GPU_a0223334=[ id="GPU-a0223334"; DeviceUuid="a0223334-4445-..."; ]

As condor_startd reads it (ResAttributes.cpp, init_machine_resource_from_script): the
ids are DetectedGPUs'; each GPU's properties are the `Common` ad updated with the nested
ad whose `id` (else whose name) is that GPU's, without the `id` itself. Other nested ads
and attributes are not published. A node without the program (execd without HTCondor
installed) is told apart by the caller, which asks NVML instead.
"""

from __future__ import annotations

from typing import Any

from execd.classads import ClassAdError, parse_ad
from execd.errors import ResourceError
from execd.machine.custom import detected_ids
from execd.machine.facts import GpuInfo

COMMON = "common"


def _value(ad: Any, key: str) -> object:
    value = ad.eval(key)
    return value if isinstance(value, bool | int | float | str) else str(ad.lookup(key))


def _properties(ad: Any) -> dict[str, object]:
    return {key: _value(ad, key) for key in ad if key.lower() != "id"}


def parse_gpu_inventory(output: str, name: str = "GPUs") -> tuple[GpuInfo, ...]:
    """The GPUs (ids and properties) of condor_gpu_discovery's `-properties` output."""
    ids = detected_ids(name, output)
    try:
        ad = parse_ad(output)
    except ClassAdError as exc:
        raise ResourceError(f"MACHINE_RESOURCE_INVENTORY_{name}: {exc}") from None
    nested = {key: ad[key] for key in ad if hasattr(ad.get(key), "keys")}
    common = next((v for k, v in nested.items() if k.lower() == COMMON), None)
    props: dict[str, dict[str, object]] = {
        gid: _properties(common) if common is not None else {} for gid in ids
    }
    for key, device in nested.items():
        if key.lower() == COMMON:
            continue
        gid = device.get("id")
        gid = gid if isinstance(gid, str) else key
        if gid in props:
            props[gid].update(_properties(device))
    return tuple(GpuInfo(id=gid, properties=props[gid]) for gid in ids)
