"""OFFLINE_MACHINE_RESOURCE_<name>: ids of a resource that no slot gets, as condor_startd
25.14.1 showed them in the pool (simulated V100s, one offline; `MACHINE_RESOURCE_Bar =
b1, b2, b3` with b2 offline): not assigned nor available, not counted in <name> and
Total<name> (nor in Detected<name> of a configured list; an inventory's Detected<name>
keeps them), and `Offline<name> = "id,id"` in every slot ad."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs
from test_detect_gpus import detect
from test_gpu_job_env import V100S, carved

from execd.classads import evaluate
from execd.config.loader import parse_config_text
from execd.errors import ResourceError
from execd.slots.from_config import detection_params
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import ResourceRequest

SIMULATED = "STARTD_DETECT_GPUS = -properties -simulate:2,2\n"


def test_an_offline_gpu_is_given_to_no_slot_and_every_slot_names_it() -> None:
    with capture_logs() as events:
        facts = detect(SIMULATED + "OFFLINE_MACHINE_RESOURCE_GPUs = GPU-a0223334\n", V100S)
    assert facts.offline == {"GPUs": ("GPU-a0223334",)}
    assert [e["ids"] for e in events if e["event"] == "resource_offline"] == [["GPU-a0223334"]]
    ads = carved(facts, 1)
    p, d = ads["slot1"], ads["slot1_1"]
    assert (p["TotalGPUs"], p["GPUs"], p["AssignedGPUs"], p["DetectedGPUs"]) == (
        1, 0, "GPU-b1223334", "GPU-a0223334, GPU-b1223334")
    assert (d["AssignedGPUs"], d["GPUs_DeviceUuid"]) == (
        "GPU-b1223334", "b1223334-4445-5667-899a-abbccddeeff0")
    assert p["OfflineGPUs"] == d["OfflineGPUs"] == "GPU-a0223334"
    assert evaluate("size(AvailableGPUs)", p) == 0


def test_no_second_gpu_for_a_job_when_one_is_offline() -> None:
    facts = detect(SIMULATED + "OFFLINE_MACHINE_RESOURCE_GPUs = GPU-a0223334\n", V100S)
    node = NodeSlots(facts, build_layout(default_slot_types(), facts))
    with pytest.raises(ResourceError, match="GPUs"):
        node.partitionable[1].carve(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024,
                                                    custom={"GPUs": 2}))  # fmt: skip


def test_an_offline_instance_of_a_configured_list() -> None:
    """condor_startd's DetectedBar of a configured list counts the online ones only."""
    facts = detect("MACHINE_RESOURCE_Bar = b1, b2, b3\nOFFLINE_MACHINE_RESOURCE_Bar = b2\n",
                   None)  # fmt: skip
    p = carved(facts)["slot1"]
    assert (p["Bar"], p["TotalBar"], p["DetectedBar"], p["AssignedBar"], p["OfflineBar"]) == (
        2, 2, 2, "b1,b3", "b2")
    assert evaluate("size(AvailableBar)", p) == 2


def test_ids_the_resource_does_not_have_are_ignored() -> None:
    facts = detect(SIMULATED + "OFFLINE_MACHINE_RESOURCE_GPUs = GPU-zzz, GPU-b1223334\n"
                   "OFFLINE_MACHINE_RESOURCE_Nothing = x\n", V100S)  # fmt: skip
    assert facts.offline == {"GPUs": ("GPU-b1223334",)}
    p = carved(facts)["slot1"]
    assert (p["TotalGPUs"], p["OfflineGPUs"]) == (1, "GPU-b1223334")
    assert not [key for key in p if key.startswith("Offline") and key != "OfflineGPUs"]


def test_offline_ids_are_read_case_blind_from_the_knob_name() -> None:
    config = parse_config_text("offline_machine_resource_gpus = GPU-a0223334 GPU-b1223334\n",
                               env={})  # fmt: skip
    assert detection_params(config, config.names()).offline == {
        "gpus": ("GPU-a0223334", "GPU-b1223334")}
    facts = detect(SIMULATED + "offline_machine_resource_gpus = GPU-a0223334, GPU-b1223334\n",
                   V100S)  # fmt: skip
    assert carved(facts)["slot1"]["TotalGPUs"] == 0
