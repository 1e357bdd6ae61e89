"""All the slots of a node: static and partitionable slots from the layout, the dynamic
slots carved from them, and their ads built in one pass (with STARTD_SLOT_ATTRS)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from execd.machine.facts import MachineFacts, MachineLoad
from execd.slots.ads import (
    PolicyFacts,
    SlotResources,
    build_slot_ad,
    cross_post,
    dynamic_resources,
    partitionable_resources,
    static_resources,
)
from execd.slots.layout import SlotDefinition
from execd.slots.partitionable import PartitionableSlot


class NodeSlots:
    def __init__(self, facts: MachineFacts, definitions: Sequence[SlotDefinition]) -> None:
        self.facts = facts
        self.definitions = list(definitions)
        props: dict[str, Mapping[str, object]] = {g.id: g.properties for g in facts.gpus}
        self.partitionable: dict[int, PartitionableSlot] = {
            d.slot_id: PartitionableSlot(
                d, int(d.disk_fraction * facts.total_disk_kb), instance_props=props
            )
            for d in definitions
            if d.partitionable
        }

    def resources(self) -> list[SlotResources]:
        """Every slot in HTCondor's order: slot1, slot1_1, slot1_2, slot2, ..."""
        out: list[SlotResources] = []
        for d in self.definitions:
            p = self.partitionable.get(d.slot_id)
            if p is None:
                out.append(static_resources(d, self.facts))
                continue
            out.append(partitionable_resources(p, self.facts))
            for sub in sorted(p.dynamic):
                out.append(dynamic_resources(p.dynamic[sub], p, self.facts))
        return out

    def resource_ad(self, name: str, now: int,
                    machine_load: MachineLoad | None = None) -> Any | None:
        """One slot's ad with its resources only (no policy, slot load or STARTD_ATTRS;
        the machine's load and idle times if given): what a job's resource environment
        and its .machine.ad are computed from, without building every slot's."""
        for res in self.resources():
            if res.name == name:
                return build_slot_ad(self.facts, res, now=now, machine_load=machine_load)
        return None

    def build_ads(
        self,
        *,
        now: int,
        machine_load: MachineLoad | None = None,
        policy_for: Callable[[str], PolicyFacts] | None = None,
        startd_attrs_for: Callable[[int], Mapping[str, str]] | None = None,
        slot_attrs: Sequence[str] = (),
        load_for: Mapping[str, float] | None = None,
        condor_load_for: Mapping[str, float] | None = None,
        address: str | None = None,
    ) -> list[Any]:
        named = []
        for res in self.resources():
            ad = build_slot_ad(
                self.facts,
                res,
                now=now,
                policy=policy_for(res.name) if policy_for else None,
                machine_load=machine_load,
                load_avg=(load_for or {}).get(res.name, 0.0),
                condor_load_avg=(condor_load_for or {}).get(res.name, 0.0),
                startd_attrs=startd_attrs_for(res.slot_id) if startd_attrs_for else None,
                address=address,
            )
            named.append((res.name, ad))
        if slot_attrs:
            cross_post(named, slot_attrs)
        return [ad for _name, ad in named]
