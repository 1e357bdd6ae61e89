"""A partitionable slot's roll-up of its dynamic slots (`Child<Attr>` lists), as
condor_startd 25.x publishes it (Resource::publishDynamicChildSummaries).

Every p-slot ad gets, unless ADVERTISE_PSLOT_ROLLUP_INFORMATION is false,
`PslotRollupInformation = true` and for each rolled-up attribute a list
`Child<Attr> = { v1, v2, ... }` of its d-slots' values: evaluated in each d-slot's ad
(strings quoted, reals as reals), `undefined` where a d-slot has none, in the order of
the d-slot names compared byte by byte (`slot1_1`, `slot1_10`, `slot1_2`, as the startd's
child set orders them). The attributes are the fixed set below, every machine resource
(GPUs, MACHINE_RESOURCE_<name>) and those STARTD_PARTITIONABLE_SLOT_ATTRS names. Each
d-slot says `PslotRollupInformation = true` too: the negotiator reads it to know that
its p-slot carries the roll-up (pslot preemption, ALLOW_PSLOT_PREEMPTION).
`NumDynamicSlots` is published whatever the knob says (execd.slots.ads).

The roll-up is built last, from the finished ads (state, claimant, STARTD_ATTRS), so a
p-slot's lists always say what its d-slots' ads say in the same advertisement.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from execd.classads import Value
from execd.slots.layout import STANDARD

# the attributes condor_startd always rolls up (before machine resources and the admin's)
ROLLED_UP = ("Name", "DSlotId", "CurrentRank", "RemoteUser", "RemoteOwner", "AccountingGroup",
             "State", "Activity", "EnteredCurrentState", "RetirementTimeRemaining", "Cpus",
             "Memory", "Disk")  # fmt: skip
ROLLUP_FLAG = "PslotRollupInformation"  # HTCondor's spelling (ATTR_PSLOT_ROLLUP_INFORMATION)


@dataclass(frozen=True)
class RollupSettings:
    enabled: bool = True  # ADVERTISE_PSLOT_ROLLUP_INFORMATION
    extra_attrs: tuple[str, ...] = ()  # STARTD_PARTITIONABLE_SLOT_ATTRS


def rolled_up_attributes(machine_resources: Iterable[str],
                         extra: Iterable[str] = ()) -> list[str]:  # fmt: skip
    """The attributes a p-slot rolls up: the fixed set, its machine resources, the
    admin's; attribute names are case-blind, so the first spelling of a name wins."""
    seen: dict[str, str] = {}
    resources = [r for r in machine_resources if r not in STANDARD]
    for name in (*ROLLED_UP, *resources, *extra):
        seen.setdefault(name.lower(), name)
    return list(seen.values())


def _short_name(ad: Any) -> str:
    return str(ad.get("Name", "")).split("@", 1)[0]


def _value(ad: Any, attr: str) -> Any:
    """The attribute evaluated in the d-slot's ad; undefined where it has none."""
    if attr not in ad:
        return Value.Undefined
    return ad.eval(attr)


def publish_child_summaries(ads: Sequence[Any], settings: RollupSettings) -> None:
    """Add the roll-up to every p-slot ad among `ads` (and the flag to its d-slots)."""
    if not settings.enabled:
        return
    parents = [ad for ad in ads if ad.get("PartitionableSlot") is True]
    if not parents:
        return
    children: dict[str, list[Any]] = {}
    for ad in ads:
        if ad.get("DynamicSlot") is True:
            ad[ROLLUP_FLAG] = True
            children.setdefault(str(ad.get("ParentSlotName", "")), []).append(ad)
    for parent in parents:
        # byte order of the names, as the startd's std::set of its children (strcmp)
        kids = sorted(children.get(str(parent["Name"]), []),
                      key=lambda ad: _short_name(ad).encode())  # fmt: skip
        parent[ROLLUP_FLAG] = True
        resources = str(parent.get("MachineResources", "")).split()
        for attr in rolled_up_attributes(resources, settings.extra_attrs):
            parent[f"Child{attr}"] = [_value(kid, attr) for kid in kids]
