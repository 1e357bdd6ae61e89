"""A p-slot's roll-up of its d-slots (Child<Attr> lists, PslotRollupInformation), as
condor_startd 25.14.1 publishes it (checked in the pool tier, test_pool_rollup.py)."""

from __future__ import annotations

from typing import Any

import pytest

from execd.classads import Value, parse_expr
from execd.config.loader import parse_config_text
from execd.machine.facts import CustomResource, MachineFacts
from execd.slots import from_config
from execd.slots.layout import SlotTypeInput, build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import ResourceRequest
from execd.slots.rollup import RollupSettings, publish_child_summaries, rolled_up_attributes

COGS = CustomResource("Cogs", 3.0, instances=("c1", "c2", "c3"))
FACTS = MachineFacts(detected_cpus=8, detected_cores=8, detected_memory_mb=8192,
                     total_cpus=8, total_memory_mb=8192, total_disk_kb=10_000_000,
                     total_vm_kb=0, custom={"Cogs": COGS}, hostname="node.example")  # fmt: skip
FIXED = ["Name", "DSlotId", "CurrentRank", "RemoteUser", "RemoteOwner", "AccountingGroup",
         "State", "Activity", "EnteredCurrentState", "RetirementTimeRemaining", "Cpus",
         "Memory", "Disk"]  # fmt: skip


def node_with(*requests: ResourceRequest) -> NodeSlots:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    for request in requests:
        node.partitionable[1].carve(request)
    return node


DEFAULTS = RollupSettings()


def rolled_up(node: NodeSlots, settings: RollupSettings = DEFAULTS,
              **claimed: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The node's ads by slot name, each claimed slot's extra attributes merged in (as
    the daemon merges state and claimant) before the roll-up."""
    ads = node.build_ads(now=1000)
    for ad in ads:
        ad.update(claimed.get(str(ad["Name"]).split("@")[0], {}))
    publish_child_summaries(ads, settings)
    return {str(ad["Name"]).split("@")[0]: ad for ad in ads}


def child_lists(ad: Any) -> dict[str, list[Any]]:
    return {k: list(ad.eval(k)) for k in ad if k.startswith("Child")}


def test_an_idle_pslot_has_the_flag_and_an_empty_list_for_each_attribute() -> None:
    p = rolled_up(node_with())["slot1"]
    assert p["PslotRollupInformation"] is True
    assert p["NumDynamicSlots"] == 0
    # the fixed set, then every machine resource (GPUs always, as condor_startd)
    assert child_lists(p) == {f"Child{a}": [] for a in [*FIXED, "Cogs", "GPUs"]}
    assert "PslotRollupInformation = true" in p.printOld()
    assert "ChildCpus = {  }" in p.printOld()


def test_the_lists_hold_each_dslots_values_in_order_of_its_name() -> None:
    node = node_with(ResourceRequest(cpus=2, memory_mb=256, disk_kb=1024, custom={"Cogs": 1}),
                     ResourceRequest(cpus=1, memory_mb=128, disk_kb=2048))  # fmt: skip
    ads = rolled_up(node, slot1_1={"State": "Claimed", "Activity": "Busy",
                                   "RemoteUser": "alice@example", "RemoteOwner": "alice@example",
                                   "AccountingGroup": "physics.alice@example",
                                   "CurrentRank": 1.0, "EnteredCurrentState": 990,
                                   "RetirementTimeRemaining": 60},
                    slot1_2={"State": "Claimed", "Activity": "Idle",
                             "EnteredCurrentState": 995})  # fmt: skip
    p = ads["slot1"]
    lists = child_lists(p)
    assert lists["ChildName"] == ["slot1_1@node.example", "slot1_2@node.example"]
    assert lists["ChildDSlotId"] == [1, 2]
    assert lists["ChildCpus"] == [2, 1]
    assert lists["ChildMemory"] == [256, 128]
    assert lists["ChildDisk"] == [1024, 2048]
    assert lists["ChildCogs"] == [1, 0]
    assert lists["ChildGPUs"] == [0, 0]
    assert lists["ChildState"] == ["Claimed", "Claimed"]
    assert lists["ChildActivity"] == ["Busy", "Idle"]
    assert lists["ChildEnteredCurrentState"] == [990, 995]
    assert lists["ChildRetirementTimeRemaining"] == [60, Value.Undefined]
    # a d-slot without a claimant has none: undefined in its place
    assert lists["ChildRemoteUser"] == ["alice@example", Value.Undefined]
    assert lists["ChildRemoteOwner"] == ["alice@example", Value.Undefined]
    assert lists["ChildAccountingGroup"] == ["physics.alice@example", Value.Undefined]
    # value forms as condor_startd's: strings quoted, reals as reals, undefined spelled out
    text = p.printOld()
    assert 'ChildState = { "Claimed","Claimed" }' in text
    assert "ChildCurrentRank = { 1.0,0.0 }" in text
    assert 'ChildRemoteUser = { "alice@example",undefined }' in text
    assert p["NumDynamicSlots"] == 2
    for name in ("slot1_1", "slot1_2"):  # each d-slot says its p-slot rolls it up
        d = ads[name]
        assert (d["PslotRollupInformation"], d["ParentSlotId"]) == (True, 1)
        assert not [k for k in d if k.startswith("Child")]
    assert (ads["slot1_1"]["DSlotId"], ads["slot1_2"]["DSlotId"]) == (1, 2)


def test_children_are_ordered_as_their_names_compare_byte_by_byte() -> None:
    """condor_startd's child set compares names with strcmp: slot1_10 before slot1_2."""
    node = node_with(*[ResourceRequest(cpus=0.5, memory_mb=1, disk_kb=1)] * 11)
    lists = child_lists(rolled_up(node)["slot1"])
    assert lists["ChildDSlotId"] == [1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9]


def test_admin_attributes_are_rolled_up_too_and_undefined_where_missing() -> None:
    node = node_with(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024))
    settings = RollupSettings(extra_attrs=("LoadAvg", "NoSuchAttr", "cpus", "SlotTypeID"))
    p = rolled_up(node, settings, slot1_1={"LoadAvg": 0.25})["slot1"]
    lists = child_lists(p)
    assert lists["ChildLoadAvg"] == [0.25]
    assert lists["ChildNoSuchAttr"] == [Value.Undefined]
    assert lists["ChildSlotTypeID"] == [0]
    # names are case-blind: the admin's `cpus` is the built-in Cpus, listed once
    assert [k for k in lists if k.lower() == "childcpus"] == ["ChildCpus"]


def test_values_are_evaluated_in_the_child_ad() -> None:
    node = node_with(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024))
    ads = node.build_ads(now=1000)
    ads[1]["Half"] = 2
    ads[1]["Twice"] = parse_expr("Cpus * 2 + Half")
    ads[1]["Broken"] = parse_expr('"a" + 1')
    publish_child_summaries(ads, RollupSettings(extra_attrs=("Twice", "Broken")))
    lists = child_lists(ads[0])
    assert lists["ChildTwice"] == [4]
    assert lists["ChildBroken"] == [Value.Error]


def test_without_the_rollup_knob_only_num_dynamic_slots_is_published() -> None:
    node = node_with(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024))
    ads = rolled_up(node, RollupSettings(enabled=False))
    assert ads["slot1"]["NumDynamicSlots"] == 1
    for ad in ads.values():
        assert "PslotRollupInformation" not in ad
        assert not [k for k in ad if k.startswith("Child")]


def test_static_slots_have_no_rollup() -> None:
    node = NodeSlots(FACTS, build_layout([SlotTypeInput(1, "50%", 2)], FACTS))
    for ad in rolled_up(node).values():
        assert "PslotRollupInformation" not in ad and "ChildName" not in ad


@pytest.mark.parametrize(("text", "enabled", "extra"), [
    ("", True, ()),
    ("ADVERTISE_PSLOT_ROLLUP_INFORMATION = false\n", False, ()),
    ("ADVERTISE_PSLOT_ROLLUP_INFORMATION = off\n", False, ()),
    ("STARTD_PARTITIONABLE_SLOT_ATTRS = LoadAvg, Foo Bar\n", True, ("LoadAvg", "Foo", "Bar")),
])  # fmt: skip
def test_the_knobs(text: str, enabled: bool, extra: tuple[str, ...]) -> None:
    settings = from_config.rollup_settings(parse_config_text(text))
    assert settings == RollupSettings(enabled=enabled, extra_attrs=extra)


def test_rolled_up_attributes_leave_out_the_standard_resources() -> None:
    names = rolled_up_attributes(["Cpus", "Memory", "Disk", "Swap", "GPUs", "Cogs"], ["Foo"])
    assert names == [*FIXED, "GPUs", "Cogs", "Foo"]
