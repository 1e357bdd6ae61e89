"""The slot's resources the starter gives the shadow (execd/wire/slot_resources.py),
pinned against HTCondor's own starter in job1.pcap: from the dynamic slot ad that starter
ran in, execd sends exactly the resource attributes HTCondor's starter sent in
register_starter_info (which the shadow prints in the execute event, 001) and in its
first register_job_info (the Allocated column of the 004/005 resource table)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from test_shadow_syscalls import _ad_of, activation

from execd.claims.ids import ClaimIdFactory
from execd.classads import evaluate
from execd.machine.facts import GpuInfo, MachineFacts
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import ResourceRequest
from execd.wire.classad_codec import is_private, to_classad
from execd.wire.shadow import ShadowOptions, _starter_ad
from execd.wire.slot_resources import (
    nested_slot_ad,
    provisioned_resources,
    starter_info_resources,
)
from execd.wire.startd_ads import advertised_pair

# What register_starter_info carries besides the resources (the slot's name, addresses,
# versions, domains, the sandbox, the nested SlotAd): not this module's.
NOT_RESOURCES = {"Name", "SlotAd", "Machine", "AddressV1", "MyAddress", "UidDomain",
                 "HasReconnect", "CondorVersion", "MyCurrentTime", "StarterIpAddr",
                 "CondorPlatform", "CondorScratchDir", "FileSystemDomain"}  # fmt: skip


H100 = GpuInfo("GPU-ed351562", {"DeviceName": "NVIDIA H100 80GB HBM3", "Capability": 9.0})
FACTS = MachineFacts(detected_cpus=4, detected_cores=4, detected_memory_mb=8192,
                     total_cpus=4, total_memory_mb=8192, total_disk_kb=67089804,
                     total_vm_kb=0, gpus=(H100,), arch="X86_64", opsys_and_ver="Debian12",
                     opsys_ver=1200, hostname="node.example")  # fmt: skip
NO_GPU_FACTS = dataclasses.replace(FACTS, gpus=())


def dynamic_slot_ad(facts: MachineFacts, memory_mb: int, gpus: int = 0) -> Any:
    """execd's ad of a dynamic slot carved from its partitionable slot."""
    node = NodeSlots(facts, build_layout(default_slot_types(), facts))
    node.partitionable[1].carve(ResourceRequest(cpus=1, memory_mb=memory_mb, disk_kb=102400,
                                                custom={"GPUs": gpus} if gpus else {}))
    return next(ad for ad in node.build_ads(now=1000) if ad["Name"] == "slot1_1@node.example")


def real_starter() -> tuple[dict[str, str], dict[str, str], object]:
    """HTCondor's register_starter_info ad, its first register_job_info ad, its slot ad."""
    starter, _ = activation()
    info, update = dict(_ad_of(starter[1])), dict(_ad_of(starter[3]))
    return info, update, to_classad(info)["SlotAd"]


def test_the_real_starters_resources_from_its_slot_ad() -> None:
    info, update, slot_ad = real_starter()
    expected = {k: v for k, v in info.items() if k not in NOT_RESOURCES}
    assert set(expected) == {"MachineResources", "Cpus", "Disk", "GPUs", "Memory"}
    assert starter_info_resources(slot_ad) == expected
    update.pop("_condor_JOBINFO_MAXINTERVAL")
    assert provisioned_resources(slot_ad) == update  # no Swap: the slot ad has none
    assert update["MemoryProvisioned"] == "128"


def test_execds_dynamic_slot_without_gpus_sends_what_htcondors_would() -> None:
    ad = dynamic_slot_ad(NO_GPU_FACTS, memory_mb=128)
    assert ad["MachineResources"] == "Cpus Memory Disk Swap GPUs"
    info = starter_info_resources(ad)
    assert info == {"MachineResources": '"Cpus Memory Disk Swap GPUs"', "Cpus": "1",
                    "Memory": "128", "Disk": "102400", "GPUs": "0"}  # fmt: skip
    # no AssignedGPUs nor AvailableGPUs: the slot ad has neither, as on condor_startd
    assert provisioned_resources(ad) == {
        "ProvisionedResources": '"Cpus Memory Disk Swap GPUs"', "CpusProvisioned": "1",
        "MemoryProvisioned": "128", "DiskProvisioned": "102400", "GPUsProvisioned": "0"}


def test_a_gpu_slot_sends_its_gpus_properties_and_assignment() -> None:
    ad = dynamic_slot_ad(FACTS, memory_mb=2048, gpus=1)
    info = to_classad(starter_info_resources(ad))
    assert info["GPUs"] == 1
    # AvailableGPUs and the nested ad it names: the shadow can evaluate it
    assert evaluate("AvailableGPUs[0].DeviceName", info) == "NVIDIA H100 80GB HBM3"
    provisioned = to_classad(provisioned_resources(ad))
    assert (provisioned["GPUsProvisioned"], provisioned["AssignedGPUs"]) == (1, "GPU-ed351562")


def test_the_starter_info_carries_the_claimed_slots_resources(tmp_path: Path) -> None:
    address = "<127.0.0.1:9618?addrs=127.0.0.1-9618>"
    ad = dynamic_slot_ad(NO_GPU_FACTS, memory_mb=128)
    options = ShadowOptions(slot_name=str(ad["Name"]), uid_domain="vm", slot_ad=ad)
    sent = to_classad(_starter_ad(options, tmp_path, address))
    assert (sent["Memory"], sent["Cpus"], sent["Name"]) == (128, 1, ad["Name"])
    assert sent["StarterIpAddr"] == address  # what the starter says of itself wins
    assert "Memory" not in to_classad(_starter_ad(ShadowOptions(), tmp_path, address))


# Of the real starter's SlotAd (job1.pcap): what says which slot it is and how to reach
# and match it; execd's slot ad has each.
SLOT_IDENTITY = ("Name", "MyType", "TargetType", "SlotType", "SlotID", "DSlotId", "Cpus",
                 "Memory", "Disk", "GPUs", "Machine", "MyAddress", "StartdIpAddr",
                 "Requirements", "Start", "Arch", "OpSys", "DynamicSlot", "State",
                 "Activity", "TotalSlotCpus")  # fmt: skip


def test_the_slot_ad_goes_nested_as_the_real_starters_did() -> None:
    """register_starter_info's SlotAd: the slot's public ad as one nested ClassAd, which
    the shadow's old-syntax parser reads back attribute for attribute, no secret in it."""
    real_info, _, real_slot = real_starter()
    assert real_info["SlotAd"].startswith("[ ") and real_slot["SlotType"] == "Dynamic"
    assert all(name in real_slot for name in SLOT_IDENTITY)

    address = "<127.0.0.1:9618?addrs=127.0.0.1-9618>"
    claim = ClaimIdFactory(address, 1000).new()
    public, _private = advertised_pair(dynamic_slot_ad(NO_GPU_FACTS, memory_mb=128),
                                       address=address, claim_id=claim)  # fmt: skip
    sent = nested_slot_ad(public)
    assert list(sent) == ["SlotAd"] and sent["SlotAd"].startswith("[ ")
    slot = to_classad(sent)["SlotAd"]  # as the shadow's getClassAd reads it
    assert sorted(slot.keys()) == sorted(public)
    assert all(slot.lookup(k) == to_classad({k: v}).lookup(k) for k, v in public.items())
    assert [name for name in SLOT_IDENTITY if name not in slot] == []
    assert (slot["Name"], slot["MyAddress"], slot["Memory"]) == ("slot1_1@node.example",
                                                                 address, 128)  # fmt: skip
    assert not any(is_private(name) for name in slot)
    assert claim.secret not in sent["SlotAd"]
