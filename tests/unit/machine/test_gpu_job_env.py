"""The GPUs a job sees: condor_gpu_discovery's inventory read as condor_startd reads it,
and the environment condor_starter 25.x gives a job for its slot's GPUs (starter.cpp:
_CONDOR_AssignedGPUs, ENVIRONMENT_FOR_AssignedGPUs, the UnAssigned value, and
NVIDIA_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES from AvailableGPUs' DeviceUuid)."""

from __future__ import annotations

from typing import Any

import pytest
from recorded_nodes import RecordedNvml
from structlog.testing import capture_logs

from execd.classads import evaluate
from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.assigned_env import assigned_resource_env, env_for_assigned
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.facts import MachineFacts
from execd.machine.gpu_inventory import parse_gpu_inventory
from execd.machine.reader import CommandResult, FixtureHostReader
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots
from execd.slots.requests import ResourceRequest

H100_UUID = "GPU-ed351562-b6da-78d5-6864-16084094a18f"
# `condor_gpu_discovery -simulate:2,2 -properties` (HTCondor 25.14.1)
V100S = """\
DetectedGPUs="GPU-a0223334, GPU-b1223334"
Common=[ Capability=7.0; DeviceName="Tesla V100-PCIE-16GB"; ECCEnabled=true; GlobalMemoryMb=24220; ]
GPU_a0223334=[ id="GPU-a0223334"; DevicePciBusId="0000:40:00.0"; DeviceUuid="a0223334-4445-5667-899a-abbccddeeff0"; ]
GPU_b1223334=[ id="GPU-b1223334"; DevicePciBusId="0000:41:00.0"; DeviceUuid="b1223334-4445-5667-899a-abbccddeeff0"; ]
"""  # noqa: E501 - the program's lines as they are
# `-simulate:5,1 -properties`: one A100 split into two MIG devices
MIG_ID = "MIG-GPU-a0223334-4445-5667-899a-abbccddeeff0/0/0"
MIGS = f"""\
DetectedGPUs="{MIG_ID}, MIG-GPU-a0223334-4445-5667-899a-abbccddeeff0/1/0"
Common=[ Capability=8.0; ECCEnabled=true; ]
MIG_GPU_a0223334_4445_5667_899a_abbccddeeff0_0_0=[ id="{MIG_ID}"; DevicePciBusId="0000:40:00.0"; DeviceUuid="{MIG_ID}"; GlobalMemoryMb=20086; ]
MIG_GPU_a0223334_4445_5667_899a_abbccddeeff0_1_0=[ id="MIG-GPU-a0223334-4445-5667-899a-abbccddeeff0/1/0"; DevicePciBusId="0000:40:00.0"; DeviceUuid="MIG-GPU-a0223334-4445-5667-899a-abbccddeeff0/1/0"; GlobalMemoryMb=20082; ]
"""  # noqa: E501
NO_GPU_ENV = {"GPU_DEVICE_ORDINAL": "10000", "CUDA_VISIBLE_DEVICES": "10000",
              "_CONDOR_AssignedGPUs": "10000", "NVIDIA_VISIBLE_DEVICES": "none"}  # fmt: skip


def settings(text: str = "") -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def job_env(ad: Any, config: Settings | None = None) -> dict[str, str]:
    config = config or settings()
    return assigned_resource_env(ad, config.get_str,
                                 config.get_bool("AUTO_SET_NVIDIA_VISIBLE_DEVICES", True))


def carved(facts: MachineFacts, *gpus: int) -> dict[str, Any]:
    """The node's p-slot with one d-slot per entry (that many GPUs): ads by slot name."""
    node = NodeSlots(facts, build_layout(default_slot_types(), facts))
    for count in gpus:
        node.partitionable[1].carve(ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024,
                                                    custom={"GPUs": count}))  # fmt: skip
    return {str(ad["Name"]).split("@")[0]: ad for ad in node.build_ads(now=1)}


def test_the_recorded_h100_job_sees_its_gpu_by_uuid_and_others_see_none(
        h100_reader: FixtureHostReader) -> None:  # fmt: skip
    facts = detect_machine(h100_reader, DetectionParams(execute_dir="/tmp", hostname="h100"))
    ads = carved(facts, 1, 0)
    assert job_env(ads["slot1_1"]) == {
        "GPU_DEVICE_ORDINAL": "GPU-ed351562",  # the default regex strips only CUDA/OCL
        "CUDA_VISIBLE_DEVICES": H100_UUID,  # forced to NVIDIA_VISIBLE_DEVICES (HTCONDOR-3350)
        "_CONDOR_AssignedGPUs": "GPU-ed351562",
        "NVIDIA_VISIBLE_DEVICES": H100_UUID,
    }
    # a d-slot without a GPU on a node with GPUs: the UnAssigned value, and none visible
    assert job_env(ads["slot1_2"]) == NO_GPU_ENV


def test_a_node_without_gpus_still_names_none() -> None:
    facts = MachineFacts(detected_cpus=2, detected_cores=2, detected_memory_mb=1024,
                         total_cpus=2, total_memory_mb=1024, total_disk_kb=10**6,
                         total_vm_kb=0)  # fmt: skip
    assert job_env(carved(facts, 0)["slot1_1"]) == NO_GPU_ENV


def test_condor_gpu_discovery_properties_become_each_gpus_properties() -> None:
    first, second = parse_gpu_inventory(V100S)
    assert first.id == "GPU-a0223334" and second.id == "GPU-b1223334"
    assert first.properties == {"Capability": 7.0, "DeviceName": "Tesla V100-PCIE-16GB",
                                "ECCEnabled": True, "GlobalMemoryMb": 24220,
                                "DevicePciBusId": "0000:40:00.0",
                                "DeviceUuid": "a0223334-4445-5667-899a-abbccddeeff0"}  # fmt: skip
    assert second.properties["DevicePciBusId"] == "0000:41:00.0"


def test_the_inventory_replaces_nvml_and_slots_publish_what_condor_startd_does(
        h100_reader: FixtureHostReader, h100_nvml: RecordedNvml) -> None:  # fmt: skip
    """use feature : GPUs runs condor_gpu_discovery: its GPUs, not NVML's H100."""
    command = "/usr/libexec/condor/condor_gpu_discovery -properties -simulate:2,2"
    reader = FixtureHostReader(h100_reader.root, nvml=h100_nvml, commands={
        command.split(maxsplit=1)[0]: CommandResult(0, V100S, "")})
    facts = detect_machine(reader, DetectionParams(
        execute_dir="/tmp", hostname="h", machine_inventories={"GPUs": command}))
    assert [g.id for g in facts.gpus] == ["GPU-a0223334", "GPU-b1223334"]
    ads = carved(facts, 1)
    p, d = ads["slot1"], ads["slot1_1"]
    assert (p["AssignedGPUs"], p["GPUs"], p["DetectedGPUs"]) == (
        "GPU-a0223334,GPU-b1223334", 1, "GPU-a0223334, GPU-b1223334")
    assert evaluate("AvailableGPUs.Id", p) == ["GPU-b1223334"]  # carved: a is not available
    assert "GPUs_DeviceUuid" not in p and p["GPUs_DeviceName"] == "Tesla V100-PCIE-16GB"
    assert (d["AssignedGPUs"], d["GPUs_DeviceUuid"]) == (
        "GPU-a0223334", "a0223334-4445-5667-899a-abbccddeeff0")
    assert job_env(d)["NVIDIA_VISIBLE_DEVICES"] == "GPU-a0223334-4445-5667-899a-abbccddeeff0"


def test_without_condor_gpu_discovery_installed_nvml_finds_the_gpus(
        h100_reader: FixtureHostReader) -> None:  # fmt: skip
    command = "/nowhere/condor_gpu_discovery -properties"
    with capture_logs() as events:
        facts = detect_machine(h100_reader, DetectionParams(
            execute_dir="/tmp", hostname="h", machine_inventories={"GPUs": command}))
    assert [g.id for g in facts.gpus] == ["GPU-ed351562"]
    (missing,) = [e for e in events if e["event"] == "gpu_inventory_not_installed"]
    assert "/nowhere/condor_gpu_discovery is not installed" in missing["why"]
    assert missing["instead"] == "NVML"


def test_a_mig_device_is_named_by_its_own_uuid() -> None:
    facts = MachineFacts(detected_cpus=2, detected_cores=2, detected_memory_mb=1024,
                         total_cpus=2, total_memory_mb=1024, total_disk_kb=10**6,
                         total_vm_kb=0, gpus=parse_gpu_inventory(MIGS))  # fmt: skip
    ads = carved(facts, 1)
    assert "GPUs_MIG_GPU_a0223334_4445_5667_899a_abbccddeeff0_0_0" in ads["slot1_1"]
    env = job_env(ads["slot1_1"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == MIG_ID
    assert env["_CONDOR_AssignedGPUs"] == MIG_ID


def test_knobs_rename_the_variables_and_turn_nvidia_off(
        h100_reader: FixtureHostReader) -> None:  # fmt: skip
    """The manual's example: ENVIRONMENT_FOR_AssignedGPUs = VISIBLE_GPUS,
    ENVIRONMENT_VALUE_FOR_UnAssignedGPUs = none; AUTO_SET_NVIDIA_VISIBLE_DEVICES off."""
    facts = detect_machine(h100_reader, DetectionParams(execute_dir="/tmp", hostname="h"))
    ads = carved(facts, 1, 0)
    config = settings("ENVIRONMENT_FOR_AssignedGPUs = VISIBLE_GPUS\n"
                      "ENVIRONMENT_VALUE_FOR_UnAssignedGPUs = none\n"
                      "AUTO_SET_NVIDIA_VISIBLE_DEVICES = false\n")  # fmt: skip
    assert job_env(ads["slot1_1"], config) == {"VISIBLE_GPUS": "GPU-ed351562",
                                               "_CONDOR_AssignedGPUs": "GPU-ed351562"}
    assert job_env(ads["slot1_2"], config) == {"VISIBLE_GPUS": "none",
                                               "_CONDOR_AssignedGPUs": "none"}


@pytest.mark.parametrize(("proto", "assigned", "env"), [
    # the default, for ids of `condor_gpu_discovery -by-index` (CUDA0, CUDA1)
    ("GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//", "CUDA0,CUDA1",
     {"GPU_DEVICE_ORDINAL": "0,1", "CUDA_VISIBLE_DEVICES": "0,1"}),
    ("VISIBLE_GPUS=/^/gpuid:/", "GPU-a, GPU-b", {"VISIBLE_GPUS": "gpuid:GPU-a,gpuid:GPU-b"}),
    ("SHORT=|GPU-(..).*|$1|, X=/a/b/", "GPU-abcd", {"SHORT": "ab", "X": "GPU-bbcd"}),
    # a bare name: the ids as they are, but CUDA_VISIBLE_DEVICES keeps digits and commas
    ("CUDA_VISIBLE_DEVICES", "CUDA0, CUDA1", {"CUDA_VISIBLE_DEVICES": "0,1"}),
    ("MY_GPUS", "GPU-a,GPU-b", {"MY_GPUS": "GPU-a,GPU-b"}),
    ("CUDA_VISIBLE_DEVICES=///", "CUDA3", {"CUDA_VISIBLE_DEVICES": "3"}),
], ids=["default", "prefix", "group", "bare-cuda", "bare", "cuda-empty-regex"])  # fmt: skip
def test_environment_for_assigned_rewrites_each_id(proto: str, assigned: str,
                                                   env: dict[str, str]) -> None:  # fmt: skip
    assert env_for_assigned(proto, assigned, "GPUs") == env


def test_a_malformed_entry_is_logged_and_ends_the_list() -> None:
    with capture_logs() as events:
        assert env_for_assigned("A=/x/y/ B=/unterminated", "x", "GPUs") == {"A": "y"}
    (ignored,) = events
    assert (ignored["event"], ignored["variable"]) == ("assigned_env_ignored", "B")
    assert "missing replacement end marker" in ignored["why"]


def test_configured_gpu_ids_are_published_as_condor_startd_publishes_them(
        h100_reader: FixtureHostReader) -> None:  # fmt: skip
    """MACHINE_RESOURCE_GPUs = GPU-aa11, GPU-bb22 (no properties), as condor_startd
    25.14.1 showed it in the pool: DetectedGPUs is their number, AvailableGPUs names them
    but no nested ad exists, so NVIDIA's runtime gets none of them."""
    facts = detect_machine(h100_reader, DetectionParams(
        execute_dir="/tmp", hostname="h", machine_resources={"GPUs": "GPU-aa11, GPU-bb22",
                                                             "Bar": "b1, b2"}))  # fmt: skip
    d = carved(facts, 1)["slot1_1"]
    assert (d["DetectedGPUs"], d["AssignedGPUs"], d["DetectedBar"]) == (2, "GPU-aa11", 2)
    assert evaluate("size(AvailableGPUs)", d) == 1 and "GPUs_GPU_aa11" not in d
    assert not [key for key in d if key.startswith("GPUs_")]
    assert job_env(d) == {"GPU_DEVICE_ORDINAL": "GPU-aa11", "CUDA_VISIBLE_DEVICES": "GPU-aa11",
                          "_CONDOR_AssignedGPUs": "GPU-aa11", "NVIDIA_VISIBLE_DEVICES": "none"}
