"""What the starter tells the shadow about the resources of the slot it runs in.

HTCondor's starter sends them twice (condor_starter.V6.1/jic_shadow.cpp and
starter.cpp; job1.pcap has both), and the user sees both in the job's user log:

- register_starter_info: the slot's `MachineResources` list, each listed resource's
  amount (`Cpus = 1`, `Memory = 128`, ...) and, where the slot has one, its
  `Available<Res>` list with the nested ads it names (a GPU's properties). The shadow
  copies the amounts into the execute event (001): the `Cpus = 1`, `Disk = 102400`,
  `GPUs = 0`, `Memory = 128` lines under `SlotName:`.
- the first register_job_info: `ProvisionedResources` (the same list) with
  `<Res>Provisioned` and `Assigned<Res>`. The shadow puts them in the job ad; its
  eviction (004) and termination (005) events show them as the "Allocated" and
  "Assigned" columns of their "Partitionable Resources" table. (The schedd copied them
  from the partitionable slot it matched, whose amounts are the whole slot's: the
  starter's update corrects them to the dynamic slot's.)

An amount a slot ad does not have (there is no `Swap` attribute) is left out, as
HTCondor's CopyAttribute leaves it; so are `Assigned<Res>` and `AvailableGPUs` where the
slot ad has none (a slot never bound to a GPU, a node without GPUs; execd/slots/ads.py).

register_starter_info also carries the whole slot ad, nested as `SlotAd` (the public ad
the execute point advertises, as condor_startd hands it to its starter). The shadow
keeps it for common-file catalogs (the slot's `catalogs` list names nested ads with
the path of each staged catalog) and, with `SHADOW_DEBUG = D_MACHINE`, logs it in the
"StarterInfo ad" it prints. The reconnect reply carries no SlotAd, as HTCondor's.
"""

from __future__ import annotations

from typing import Any

from execd.wire.classad_codec import WireAd, to_classad, unparse_old

# What HTCondor assumes of a slot ad without MachineResources.
DEFAULT_RESOURCES = "CPUs, Disk, Memory"


def resource_names(slot_ad: Any) -> list[str]:
    """The slot's resources, as its MachineResources names them."""
    listed = slot_ad.get("MachineResources")
    text = listed if isinstance(listed, str) else DEFAULT_RESOURCES
    return [name for name in text.replace(",", " ").split() if name]


def _copy(slot_ad: Any, name: str, out: WireAd, as_name: str | None = None) -> bool:
    if name not in slot_ad:
        return False
    out[as_name or name] = unparse_old(slot_ad.lookup(name))
    return True


def starter_info_resources(slot_ad: Any) -> WireAd:
    """register_starter_info's resource attributes (HTCondor's CopyMachineResources)."""
    out: WireAd = {}
    if isinstance(slot_ad.get("MachineResources"), str):
        out["MachineResources"] = unparse_old(slot_ad["MachineResources"])
    for name in resource_names(slot_ad):
        _copy(slot_ad, name, out)
        if _copy(slot_ad, f"Available{name}", out):
            # the nested ads it lists (GPUs_GPU_<id>), so the shadow can evaluate it
            for ref in slot_ad.internalRefs(slot_ad.lookup(f"Available{name}")):
                _copy(slot_ad, ref, out)
    return out


def provisioned_resources(slot_ad: Any) -> WireAd:
    """The first register_job_info's ProvisionedResources, <Res>Provisioned, Assigned<Res>."""
    out: WireAd = {}
    if isinstance(slot_ad.get("MachineResources"), str):
        out["ProvisionedResources"] = unparse_old(slot_ad["MachineResources"])
    for name in resource_names(slot_ad):
        _copy(slot_ad, name, out, f"{name}Provisioned")
        _copy(slot_ad, f"Assigned{name}", out)
    return out


def nested_slot_ad(published: WireAd) -> WireAd:
    """register_starter_info's `SlotAd`: the slot's public ad as one nested ad."""
    return {"SlotAd": unparse_old(to_classad(published))}
