"""Slot ClassAds: what an EP slot publishes (resources, machine facts, load, policy).

State, activity and the policy expressions come from the policy engine; this module
only takes them as :class:`PolicyFacts`. Per-slot STARTD_ATTRS arrive as resolved
expression text (the caller looked up ``SLOT<N>_<name>`` before ``<name>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from execd.classads import ClassAdError, new_ad, parse_expr
from execd.log import get_logger
from execd.machine.facts import MachineFacts, MachineLoad
from execd.machine.host_attrs import host_attributes
from execd.slots.layout import STANDARD, Assigned, SlotDefinition
from execd.slots.partitionable import DynamicSlot, PartitionableSlot

log = get_logger(__name__)


@dataclass(frozen=True)
class PolicyFacts:
    state: str = "Unclaimed"
    activity: str = "Idle"
    entered_current_state: int = 0
    entered_current_activity: int = 0
    start: str = "true"  # the START expression text
    requirements: str = "START"
    rank: str = "0.0"
    current_rank: float = 0.0


@dataclass(frozen=True)
class SlotResources:
    """One slot's resources as its ad shows them."""

    name: str  # slot1, slot1_2
    slot_id: int
    type_id: int
    slot_type: str  # Static, Partitionable or Dynamic
    cpus: float
    memory_mb: int
    disk_kb: int
    swap_kb: int
    total_slot_cpus: float
    total_slot_memory_mb: int
    total_slot_disk_kb: int
    custom: Mapping[str, Assigned] = field(default_factory=dict)  # what the slot has now
    total_slot_custom: Mapping[str, float] = field(default_factory=dict)
    # The instance ids bound to the slot (Assigned<Res>): a partitionable slot's all of
    # its own, also those carved into its dynamic slots; absent: those it has now.
    bound_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    num_dynamic_slots: int = 0
    dslot_id: int = 0  # a dynamic slot's number under its parent (slot1_2: 2)


def static_resources(d: SlotDefinition, facts: MachineFacts) -> SlotResources:
    disk = int(d.disk_fraction * facts.total_disk_kb)
    return SlotResources(
        name=d.name, slot_id=d.slot_id, type_id=d.type_id, slot_type="Static",
        cpus=d.cpus, memory_mb=d.memory_mb, disk_kb=disk,
        swap_kb=int(d.swap_fraction * facts.total_vm_kb),
        total_slot_cpus=d.cpus, total_slot_memory_mb=d.memory_mb, total_slot_disk_kb=disk,
        custom=d.custom, total_slot_custom={n: a.amount for n, a in d.custom.items()},
    )


def partitionable_resources(p: PartitionableSlot, facts: MachineFacts) -> SlotResources:
    d = p.definition
    return SlotResources(
        name=d.name, slot_id=d.slot_id, type_id=d.type_id, slot_type="Partitionable",
        cpus=p.free_cpus, memory_mb=p.free_memory_mb, disk_kb=p.free_disk_kb,
        swap_kb=int(d.swap_fraction * facts.total_vm_kb),
        total_slot_cpus=d.cpus, total_slot_memory_mb=d.memory_mb,
        total_slot_disk_kb=p.total_disk_kb, custom=p.remaining(),
        total_slot_custom={n: a.amount for n, a in d.custom.items()},
        bound_ids={n: a.ids for n, a in d.custom.items() if a.ids},
        num_dynamic_slots=len(p.dynamic),
    )


def dynamic_resources(s: DynamicSlot, p: PartitionableSlot, facts: MachineFacts) -> SlotResources:
    return SlotResources(
        name=s.name, slot_id=s.parent_id, type_id=p.definition.type_id, slot_type="Dynamic",
        cpus=s.cpus, memory_mb=s.memory_mb, disk_kb=s.disk_kb,
        swap_kb=int(p.definition.swap_fraction * facts.total_vm_kb),
        total_slot_cpus=s.cpus, total_slot_memory_mb=s.memory_mb, total_slot_disk_kb=s.disk_kb,
        custom=s.custom, total_slot_custom={n: a.amount for n, a in s.custom.items()},
        dslot_id=s.sub_id,
    )


@lru_cache(maxsize=512)
def _expr(text: str) -> Any:
    return parse_expr(text)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _machine_totals(facts: MachineFacts) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "MyType": "Machine", "TargetType": "Job",
        "Machine": facts.hostname,
        "Arch": facts.arch, "OpSys": facts.opsys,
        "OpSysAndVer": facts.opsys_and_ver or facts.opsys,
        "OpSysName": facts.opsys_name or facts.opsys,
        "OpSysLongName": facts.opsys_long_name or facts.opsys,
        "DetectedCpus": facts.detected_cpus, "DetectedCores": facts.detected_cores,
        "DetectedMemory": facts.detected_memory_mb,
        "TotalCpus": _number(facts.total_cpus), "TotalMemory": facts.total_memory_mb,
        "TotalDisk": facts.total_disk_kb, "TotalVirtualMemory": facts.total_vm_kb,
    }
    # The resources every slot of the machine may have, in HTCondor's order: the standard
    # four, then the machine's own (GPUs unless it has no GPUs resource at all) sorted as
    # its case-blind map sorts them. The schedd, the starter and the shadow read the
    # slot's amounts by these names.
    custom = {"GPUs"} if facts.gpus_resource else set()
    custom |= {res.name for res in facts.custom.values()}
    attrs["MachineResources"] = " ".join([*STANDARD, *sorted(custom, key=str.lower)])
    offline = facts.offline
    if facts.gpus_resource:
        gpu_ids = [g.id for g in facts.gpus]
        online = len(gpu_ids) - len(offline.get("GPUs", ()))
        attrs["TotalGPUs"] = online
        # Detected<Res>: an inventory's (or NVML's) id list, offline ones too, else the
        # number of those online
        attrs["DetectedGPUs"] = ", ".join(gpu_ids) if gpu_ids and not facts.gpus_configured \
            else online
    for res in facts.custom.values():
        online_count = _number(res.count - len(offline.get(res.name, ())))
        attrs[f"Total{res.name}"] = online_count
        attrs[f"Detected{res.name}"] = ", ".join(res.instances) if res.inventory \
            else online_count
    for name, ids in offline.items():  # in every ad, as condor_startd's
        attrs[f"Offline{name}"] = ",".join(ids)
    attrs.update(host_attributes(facts))  # has_*, Microarch, Cpu*, Utsname*, OpSys*
    return attrs


def machine_attributes(facts: MachineFacts) -> dict[str, Any]:
    """What every slot ad says of the machine (the startd's daemon ad holds it too)."""
    attrs = _machine_totals(facts)
    del attrs["MyType"], attrs["TargetType"]
    return attrs


def build_slot_ad(
    facts: MachineFacts,
    res: SlotResources,
    *,
    now: int,
    policy: PolicyFacts | None = None,
    machine_load: MachineLoad | None = None,
    load_avg: float = 0.0,
    condor_load_avg: float = 0.0,
    startd_attrs: Mapping[str, str] | None = None,
    address: str | None = None,
    kflops: int | None = None,
    mips: int | None = None,
) -> Any:
    policy = policy or PolicyFacts()
    machine_load = machine_load or MachineLoad()
    attrs = _machine_totals(facts)
    attrs.update({
        "Name": f"{res.name}@{facts.hostname}",
        "SlotID": res.slot_id, "SlotTypeID": res.type_id, "SlotType": res.slot_type,
        "Cpus": _number(res.cpus), "Memory": res.memory_mb, "Disk": res.disk_kb,
        "VirtualMemory": res.swap_kb,
        "TotalSlotCpus": _number(res.total_slot_cpus),
        "TotalSlotMemory": res.total_slot_memory_mb, "TotalSlotDisk": res.total_slot_disk_kb,
        "LoadAvg": load_avg, "CondorLoadAvg": condor_load_avg,
        "TotalLoadAvg": machine_load.total_load_avg,
        "TotalCondorLoadAvg": machine_load.total_condor_load_avg,
        "KeyboardIdle": machine_load.keyboard_idle, "ConsoleIdle": machine_load.console_idle,
        "State": policy.state, "Activity": policy.activity,
        "EnteredCurrentState": policy.entered_current_state,
        "EnteredCurrentActivity": policy.entered_current_activity,
        "MyCurrentTime": now,
        "Start": _expr(policy.start), "Requirements": _expr(policy.requirements),
        "Rank": _expr(policy.rank), "CurrentRank": policy.current_rank,
    })
    if res.slot_type == "Partitionable":
        attrs["PartitionableSlot"] = True
        attrs["NumDynamicSlots"] = res.num_dynamic_slots
    elif res.slot_type == "Dynamic":
        attrs["DynamicSlot"] = True
        attrs["ParentSlotName"] = f"slot{res.slot_id}@{facts.hostname}"
        attrs["ParentSlotId"] = res.slot_id
        attrs["DSlotId"] = res.dslot_id
    gpu_props = {g.id: g.properties for g in facts.gpus}
    for name, got in res.custom.items():
        if name in STANDARD:
            continue
        attrs[name] = _number(got.amount)
        attrs[f"TotalSlot{name}"] = _number(res.total_slot_custom.get(name, got.amount))
        # As condor_startd: Assigned<Res> exists once the slot was bound to instances (a
        # partitionable slot keeps all of its own, carved or not), never on a slot with
        # none of them.
        bound = res.bound_ids.get(name, got.ids)
        if bound:
            attrs[f"Assigned{name}"] = ",".join(bound)  # HTCondor joins without spaces
        if name == "GPUs" and facts.gpus:
            attrs.update(gpu_attributes(bound, got.ids, gpu_props))
        elif name in facts.custom and facts.custom[name].instances:
            # A resource with ids: which of them this slot still has, as references to
            # their (absent) property ads, as condor_startd publishes for evalInEachContext.
            attrs[f"Available{name}"] = _expr(
                "{ " + ", ".join(property_attr(f"{name}_{i}") for i in got.ids) + " }")
    if address is not None:
        attrs["MyAddress"] = address
        attrs["StartdIpAddr"] = address
    if kflops is not None:
        attrs["KFlops"] = kflops
    if mips is not None:
        attrs["Mips"] = mips
    ad = new_ad(attrs)
    add_startd_attrs(ad, res.name, startd_attrs or {})
    return ad


def add_startd_attrs(ad: Any, slot: str, startd_attrs: Mapping[str, str]) -> None:
    """STARTD_ATTRS' values (config text) as expressions in the slot's ad."""
    for name, text in startd_attrs.items():
        try:
            ad[name] = _expr(text)
        except ClassAdError as exc:
            log.warning("startd_attr_skipped", slot=slot, attr=name, error=str(exc))


def property_attr(gid: str) -> str:
    """`GPU-a0223334` -> `GPU_a0223334`: HTCondor's cleanStringForUseAsAttr(id, '_')."""
    return re.sub(r"[^A-Za-z0-9_]", "_", gid.strip()).replace("__", "_")


def gpu_attributes(bound: Sequence[str], available: Sequence[str],
                   props: Mapping[str, Mapping[str, object]]) -> dict[str, Any]:  # fmt: skip
    """A slot's GPU properties as condor_startd publishes them (ComputeDevProps,
    publish_slot_dynamic): `GPUs_<prop>` for each property all its bound GPUs share, a
    nested ad `GPUs_<id>` of each bound GPU's properties and Id, and AvailableGPUs, the
    list of those not carved into a dynamic slot (every slot of a node with GPUs has it,
    empty when none is there). GPUs without any properties (ids configured with
    MACHINE_RESOURCE_GPUs) get AvailableGPUs only, as from condor_startd."""
    attrs: dict[str, Any] = {}
    refs = ["GPUs_" + property_attr(gid) for gid in available]
    attrs["AvailableGPUs"] = _expr("{ " + ", ".join(refs) + " }")
    if not any(props.values()):  # ids without properties (MACHINE_RESOURCE_GPUs): no ads
        return attrs
    known = [gid for gid in bound if gid in props]
    if known:
        first = {k: v for k, v in props[known[0]].items() if k.lower() != "id"}
        shared = {k: v for k, v in first.items()
                  if all(props[gid].get(k) == v for gid in known[1:])}  # fmt: skip
        for key, value in shared.items():
            attrs[f"GPUs_{key}"] = value
    for gid in bound:
        own = {k: v for k, v in props.get(gid, {}).items() if k.lower() != "id"}
        attrs["GPUs_" + property_attr(gid)] = new_ad({"Id": gid, **own})
    return attrs


def cross_post(ads: Sequence[tuple[str, Any]], attrs: Sequence[str]) -> None:
    """STARTD_SLOT_ATTRS: every slot's ad gets ``<slot>_<attr>`` from every slot."""
    for source_name, source in ads:
        for attr in attrs:
            if attr not in source:
                continue
            value = source.lookup(attr)
            for _name, target in ads:
                target[f"{source_name}_{attr}"] = value
