"""Slot ads: the attributes an EP slot publishes, STARTD_ATTRS and STARTD_SLOT_ATTRS."""

from __future__ import annotations

import dataclasses
from typing import Any

from execd.classads import evaluate, is_true, new_ad
from execd.machine.facts import CustomResource, GpuInfo, MachineFacts, MachineLoad
from execd.slots.ads import PolicyFacts
from execd.slots.layout import SlotTypeInput, build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import ResourceRequest

H100 = GpuInfo("GPU-ed351562", {"DeviceName": "NVIDIA H100 80GB HBM3", "Capability": 9.0,
                                "GlobalMemoryMb": 81559})
FACTS = MachineFacts(detected_cpus=16, detected_cores=16, detected_memory_mb=128887,
                     total_cpus=16, total_memory_mb=128887, total_disk_kb=67089804,
                     total_vm_kb=0, gpus=(H100,), arch="X86_64", opsys_and_ver="Debian12",
                     opsys_ver=1200, hostname="node.example")


def ads_by_name(node: NodeSlots, **kw: Any) -> dict[str, Any]:
    return {ad["Name"]: ad for ad in node.build_ads(now=1000, **kw)}


def test_partitionable_and_dynamic_slot_ads() -> None:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    node.partitionable[1].carve(ResourceRequest(cpus=2, memory_mb=2048, disk_kb=1024,
                                                custom={"GPUs": 1}))
    ads = ads_by_name(node, machine_load=MachineLoad(total_load_avg=0.5, keyboard_idle=7,
                                                     console_idle=9))
    p, d = ads["slot1@node.example"], ads["slot1_1@node.example"]
    # the default slot is of type 0, as condor_startd 25's (no SLOT_TYPE_<N> configured)
    assert (p["SlotType"], p["PartitionableSlot"], p["SlotID"], p["SlotTypeID"]) == (
        "Partitionable", True, 1, 0)
    # as on condor_startd, the p-slot keeps its GPU bound (AssignedGPUs, its nested ad and
    # the shared GPUs_<prop>), but has it no longer available
    assert (p["Cpus"], p["Memory"], p["GPUs"], p["AssignedGPUs"]) == (
        14, 128887 - 2048, 0, "GPU-ed351562")
    totals = (p["TotalSlotCpus"], p["TotalCpus"], p["DetectedCpus"], p["TotalGPUs"])
    assert totals == (16, 16, 16, 1)
    assert p["NumDynamicSlots"] == 1
    assert (d["SlotType"], d["DynamicSlot"], d["Cpus"], d["Memory"], d["Disk"]) == (
        "Dynamic", True, 2, 2048, 1024)
    assert (d["GPUs"], d["AssignedGPUs"], d["TotalSlotGPUs"]) == (1, "GPU-ed351562", 1)
    assert d["GPUs_GPU_ed351562"]["DeviceName"] == "NVIDIA H100 80GB HBM3"
    assert d["GPUs_GPU_ed351562"]["Capability"] == 9.0
    assert evaluate("AvailableGPUs[0].Id", d) == "GPU-ed351562"
    assert evaluate("size(AvailableGPUs)", d) == 1
    assert list(p.eval("AvailableGPUs")) == []
    assert p["GPUs_GPU_ed351562"]["Id"] == "GPU-ed351562"
    for ad in (p, d):  # what all the slot's GPUs share, for matchmaking
        assert (ad["GPUs_DeviceName"], ad["GPUs_Capability"]) == ("NVIDIA H100 80GB HBM3", 9.0)
    for ad in (p, d):
        assert (ad["Machine"], ad["Arch"], ad["OpSys"], ad["OpSysAndVer"]) == (
            "node.example", "X86_64", "LINUX", "Debian12")
        assert (ad["State"], ad["Activity"], ad["MyCurrentTime"]) == ("Unclaimed", "Idle", 1000)
        assert (ad["TotalLoadAvg"], ad["KeyboardIdle"], ad["ConsoleIdle"]) == (0.5, 7, 9)
        assert ad["DetectedGPUs"] == "GPU-ed351562"


def test_gpu_attributes_only_where_condor_startd_has_them() -> None:
    """Assigned<Res> only on a slot bound to instances, AvailableGPUs only on a node with
    GPUs (ResAttributes.cpp); job1.pcap's GPU-less slot ad has neither."""
    no_gpus = dataclasses.replace(FACTS, gpus=())
    node = NodeSlots(no_gpus, build_layout(default_slot_types(), no_gpus))
    node.partitionable[1].carve(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024))
    for ad in node.build_ads(now=1000):
        assert (ad["GPUs"], ad["TotalSlotGPUs"], ad["TotalGPUs"]) == (0, 0, 0)
        assert "AssignedGPUs" not in ad and "AvailableGPUs" not in ad
    # a node with one GPU and two static slots: the one without it has no AssignedGPUs,
    # and an empty AvailableGPUs
    node = NodeSlots(FACTS, build_layout([SlotTypeInput(1, "gpus=1, 50%", 1),
                                          SlotTypeInput(2, "gpus=0, 50%", 1)], FACTS))
    with_gpu, without = ads_by_name(node).values()
    assert (with_gpu["AssignedGPUs"], evaluate("size(AvailableGPUs)", with_gpu)) == (
        "GPU-ed351562", 1)
    assert without["GPUs"] == 0 and "AssignedGPUs" not in without
    assert list(without.eval("AvailableGPUs")) == []


def text(ad: Any, attr: str) -> str:
    """An attribute's expression as text, without the unparser's layout."""
    return "".join(str(ad.lookup(attr)).split())


def test_a_resource_with_ids_publishes_which_are_available_as_condor_startd() -> None:
    """MACHINE_RESOURCE_Cogs = c1 c2 c3 on condor_startd 25.14.1 (checked in the pool's):
    AvailableCogs = { Cogs_c1,Cogs_c2,Cogs_c3 } on the p-slot; a d-slot names its own,
    the p-slot what is left; a counted resource (Widgets = 2) has no Available<Res>."""
    facts = dataclasses.replace(FACTS, gpus=(), custom={
        "Cogs": CustomResource("Cogs", 3, ("c1", "c2", "c3")),
        "Widgets": CustomResource("Widgets", 2)})
    node = NodeSlots(facts, build_layout(default_slot_types(), facts))
    (idle,) = node.build_ads(now=1000)
    assert text(idle, "AvailableCogs") == "{Cogs_c1,Cogs_c2,Cogs_c3}"
    assert "AvailableWidgets" not in idle and idle["Widgets"] == 2
    node.partitionable[1].carve(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024,
                                                custom={"Cogs": 1}))
    ads = ads_by_name(node)
    p, d = ads["slot1@node.example"], ads["slot1_1@node.example"]
    assert (text(d, "AvailableCogs"), d["AssignedCogs"]) == ("{Cogs_c1}", "c1")
    assert text(p, "AvailableCogs") == "{Cogs_c2,Cogs_c3}"


def test_policy_facts_and_requirements_evaluate_against_a_job() -> None:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    policy = PolicyFacts(state="Owner", start='Owner == "alice"', rank="1")
    (ad,) = node.build_ads(now=5, policy_for=lambda _name: policy)
    assert ad["State"] == "Owner"
    assert is_true(evaluate(ad.lookup("Requirements"), ad, new_ad({"Owner": "alice"})))
    assert not is_true(evaluate(ad.lookup("Requirements"), ad, new_ad({"Owner": "bob"})))


def test_seed_favorite_color_per_slot_startd_attrs() -> None:
    # STARTD_ATTRS = favorite_color, favorite_season; SLOT2_favorite_color = "green"
    config = {"favorite_color": '"blue"', "favorite_season": '"spring"'}
    per_slot = {2: {"favorite_color": '"green"'}, 1: {"favorite_movie": '"Star Wars"'},
                }
    facts = MachineFacts(detected_cpus=2, detected_cores=2, detected_memory_mb=1024,
                         total_cpus=2, total_memory_mb=1024, total_disk_kb=1000, total_vm_kb=0,
                         hostname="h")
    node = NodeSlots(facts, build_layout(default_slot_types(num_slots=2), facts))
    ads = ads_by_name(node, startd_attrs_for=lambda n: {**config, **per_slot.get(n, {})})
    assert ads["slot1@h"]["favorite_color"] == "blue"
    assert ads["slot2@h"]["favorite_color"] == "green"
    assert ads["slot1@h"]["favorite_movie"] == "Star Wars"
    assert "favorite_movie" not in ads["slot2@h"]
    assert ads["slot2@h"]["favorite_season"] == "spring"


def test_startd_slot_attrs_cross_post_state() -> None:
    facts = MachineFacts(detected_cpus=2, detected_cores=2, detected_memory_mb=1024,
                         total_cpus=2, total_memory_mb=1024, total_disk_kb=1000, total_vm_kb=0,
                         hostname="h")
    node = NodeSlots(facts, build_layout([SlotTypeInput(1, "50%", 2)], facts))
    states = {"slot1": "Unclaimed", "slot2": "Claimed"}
    ads = ads_by_name(node, policy_for=lambda n: PolicyFacts(state=states[n]),
                      slot_attrs=["State"])
    assert ads["slot1@h"]["slot2_State"] == "Claimed"
    assert ads["slot2@h"]["slot1_State"] == "Unclaimed"


def test_bad_startd_attr_expression_is_skipped_not_fatal() -> None:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    (ad,) = node.build_ads(now=1, startd_attrs_for=lambda _n: {"broken": "1 +", "ok": "2"})
    assert "broken" not in ad and ad["ok"] == 2


def test_address_published_once_known() -> None:
    node = NodeSlots(FACTS, build_layout(default_slot_types(), FACTS))
    (without,) = node.build_ads(now=1)
    (with_addr,) = node.build_ads(now=1, address="<10.0.0.5:9618>")
    assert "MyAddress" not in without
    assert with_addr["StartdIpAddr"] == with_addr["MyAddress"] == "<10.0.0.5:9618>"
