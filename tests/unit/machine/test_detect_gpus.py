"""STARTD_DETECT_GPUS: GPUs discovered without `use feature : GPUs`, as condor_startd 25.x
does (ResAttributes.cpp init_machine_resources): where neither MACHINE_RESOURCE_GPUs nor
MACHINE_RESOURCE_INVENTORY_GPUs is defined, `$(LIBEXEC)/condor_gpu_discovery
$(STARTD_DETECT_GPUS)` is the GPUs inventory (default `-properties
$(GPU_DISCOVERY_EXTRA)`, that knob unset); false, 0 or empty turn it off and leave the
node without a GPUs resource; true or 1 is an invalid configuration, logged, and no
discovery. What condor_startd 25.14.1 published with each is in tests/pool/test_pool_gpus.py.
"""

from __future__ import annotations

import pytest
from recorded_nodes import FIXTURES, RecordedNvml
from structlog.testing import capture_logs
from test_gpu_job_env import NO_GPU_ENV, V100S, carved, job_env

from execd.classads import evaluate
from execd.config.loader import parse_config_text
from execd.errors import ResourceError
from execd.machine.custom import run_inventory
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.facts import MachineFacts
from execd.machine.reader import CommandResult, FixtureHostReader
from execd.slots.from_config import detection_params

DISCOVERY = "/usr/libexec/condor_gpu_discovery"
# what the pool chroot's condor_gpu_discovery -properties prints on a node without GPUs
NONE_FOUND = "DetectedGPUs=0\n"
GPU_ATTRS = ("GPUs", "TotalGPUs", "TotalSlotGPUs", "DetectedGPUs", "AssignedGPUs")


def params(text: str) -> DetectionParams:
    config = parse_config_text(text, filename="execd.conf", env={})
    return detection_params(config, config.names(), hostname="h")


def reader(output: str | None, nvml: RecordedNvml | None = None) -> FixtureHostReader:
    """A node whose condor_gpu_discovery prints `output` (None: not installed)."""
    commands = {} if output is None else {DISCOVERY: CommandResult(0, output, "")}
    return FixtureHostReader(FIXTURES / "h100-node", nvml=nvml, commands=commands)


def detect(text: str, output: str | None, nvml: RecordedNvml | None = None) -> MachineFacts:
    return detect_machine(reader(output, nvml), params("EXECUTE = /tmp\n" + text))


def gpu_attrs(facts: MachineFacts) -> dict[str, object]:
    ad = carved(facts)["slot1"]
    found = {k: ad[k] for k in GPU_ATTRS if k in ad}
    return {**found, "MachineResources": ad["MachineResources"]}


@pytest.mark.parametrize(("text", "command"), [
    ("", f"{DISCOVERY} -properties"),  # GPU_DISCOVERY_EXTRA is unset in HTCondor 25.14.1
    ("GPU_DISCOVERY_EXTRA = -extra\n", f"{DISCOVERY} -properties -extra"),
    ("STARTD_DETECT_GPUS = -properties -simulate:2,2\nLIBEXEC = /opt/condor/libexec\n",
     "/opt/condor/libexec/condor_gpu_discovery -properties -simulate:2,2"),
    ("LIBEXEC = /opt/my condor\n", "'/opt/my condor/condor_gpu_discovery' -properties"),
], ids=["default", "extra", "simulate", "libexec-with-space"])  # fmt: skip
def test_without_gpu_configuration_condor_gpu_discovery_runs_with_startd_detect_gpus(
        text: str, command: str) -> None:  # fmt: skip
    assert params(text).gpu_discovery == command


@pytest.mark.parametrize("value", ["false", "FALSE", "0", ""])
def test_false_zero_or_empty_turn_discovery_off_and_the_gpus_resource_with_it(
        value: str, h100_nvml: RecordedNvml) -> None:  # fmt: skip
    """The node's H100 (NVML) is not looked for: no GPU attribute, no GPUs resource, and
    a job gets no GPU variable at all (condor_startd 25.14.1 in the pool: same)."""
    facts = detect(f"STARTD_DETECT_GPUS = {value}\n", V100S, h100_nvml)
    assert (facts.gpus, facts.gpus_resource) == ((), False)
    ads = carved(facts, 0)
    assert ads["slot1"]["MachineResources"] == "Cpus Memory Disk Swap"
    assert not [key for ad in ads.values() for key in ad if "GPU" in key.upper()]
    assert job_env(ads["slot1_1"]) == {}


@pytest.mark.parametrize("value", ["true", "True", "1"])
def test_true_or_one_is_a_configuration_error_that_names_the_knob(value: str) -> None:
    with capture_logs() as events:
        facts = detect(f"STARTD_DETECT_GPUS = {value}\n", V100S)
    (error,) = [e for e in events if e["log_level"] == "error"]
    assert (error["event"], error["knob"], error["value"]) == (
        "config_invalid", "STARTD_DETECT_GPUS", value)
    assert "false, 0 or empty" in error["error"]
    assert not facts.gpus_resource and "TotalGPUs" not in carved(facts)["slot1"]


def test_simulated_gpus_without_use_feature_gpus(h100_nvml: RecordedNvml) -> None:
    """condor_gpu_discovery's GPUs, not NVML's H100, with their properties."""
    facts = detect("STARTD_DETECT_GPUS = -properties -simulate:2,2\n", V100S, h100_nvml)
    assert [g.id for g in facts.gpus] == ["GPU-a0223334", "GPU-b1223334"]
    assert facts.gpus[0].properties["DeviceName"] == "Tesla V100-PCIE-16GB"
    assert evaluate("AvailableGPUs.DeviceUuid", carved(facts)["slot1"]) == [
        "a0223334-4445-5667-899a-abbccddeeff0", "b1223334-4445-5667-899a-abbccddeeff0"]
    assert gpu_attrs(facts) == {
        "GPUs": 2, "TotalGPUs": 2, "TotalSlotGPUs": 2,
        "DetectedGPUs": "GPU-a0223334, GPU-b1223334", "AssignedGPUs": "GPU-a0223334,GPU-b1223334",
        "MachineResources": "Cpus Memory Disk Swap GPUs"}  # fmt: skip


def test_no_gpu_found_is_a_gpus_resource_of_none() -> None:
    """condor_gpu_discovery's `DetectedGPUs=0` (this machine's): GPUs = 0, DetectedGPUs = 0,
    and a job gets the UnAssigned values, as from condor_startd 25.14.1."""
    facts = detect("", NONE_FOUND)
    assert (facts.gpus, facts.gpus_resource) == ((), True)
    assert gpu_attrs(facts) == {"GPUs": 0, "TotalGPUs": 0, "TotalSlotGPUs": 0,
                                "DetectedGPUs": 0,
                                "MachineResources": "Cpus Memory Disk Swap GPUs"}  # fmt: skip
    assert job_env(carved(facts, 0)["slot1_1"]) == NO_GPU_ENV


def test_without_condor_gpu_discovery_nvml_is_asked_and_says_so(
        h100_nvml: RecordedNvml) -> None:  # fmt: skip
    with capture_logs() as events:
        facts = detect("", None, h100_nvml)
    assert [g.id for g in facts.gpus] == ["GPU-ed351562"]
    (missing,) = [e for e in events if e["event"] == "gpu_inventory_not_installed"]
    assert (missing["log_level"], missing["instead"]) == ("info", "NVML")
    assert f"{DISCOVERY} is not installed" in missing["why"]


def test_a_failing_default_discovery_is_logged_and_finds_no_gpu() -> None:
    """condor_startd counts a discovery that fails as 0 GPUs and runs on; so does execd
    (a configured MACHINE_RESOURCE_INVENTORY_GPUs that fails is a ResourceError)."""
    broken = FixtureHostReader(FIXTURES / "h100-node", commands={
        DISCOVERY: CommandResult(1, "", "cuInit failed")})  # fmt: skip
    with capture_logs() as events:
        facts = detect_machine(broken, params("EXECUTE = /tmp\n"))
    assert gpu_attrs(facts)["GPUs"] == 0 and facts.gpus_resource
    (failed,) = [e for e in events if e["event"] == "gpu_discovery_failed"]
    assert failed["log_level"] == "warning"
    assert failed["why"].startswith(f"STARTD_DETECT_GPUS: {DISCOVERY} exited with status 1")
    with pytest.raises(ResourceError, match="MACHINE_RESOURCE_INVENTORY_GPUs"):
        detect_machine(broken, params(
            f"EXECUTE = /tmp\nMACHINE_RESOURCE_INVENTORY_GPUs = {DISCOVERY} -properties\n"))


def test_a_host_without_htcondor_nor_nvml_has_no_gpu_and_no_error() -> None:
    """`make run` on a plain host: neither program nor NVML; a GPUs resource of none."""
    with capture_logs() as events:
        facts = detect("", None)
    assert facts.gpus == () and facts.gpus_resource
    assert [e["event"] for e in events] == ["gpu_inventory_not_installed",
                                            "gpu_detection_skipped"]  # fmt: skip
    assert all(e["log_level"] == "info" for e in events)
    assert events[0]["why"] == f"STARTD_DETECT_GPUS: {DISCOVERY} is not installed"


@pytest.mark.parametrize("text", [
    "MACHINE_RESOURCE_GPUs = GPU-aa11\n",
    "MACHINE_RESOURCE_GPUs = 0\n",
    "MACHINE_RESOURCE_INVENTORY_GPUs = /usr/bin/false\n",
], ids=["ids", "zero", "inventory"])  # fmt: skip
def test_a_configured_gpus_resource_replaces_discovery(text: str) -> None:
    assert params(text).gpu_discovery is None
    facts = detect(text, V100S)
    assert facts.gpus_resource and "GPU-a0223334" not in [g.id for g in facts.gpus]


def test_an_empty_machine_resource_gpus_leaves_no_gpus_resource() -> None:
    """Defined, even empty, it stops discovery (param_defined), and it names no GPU."""
    facts = detect("MACHINE_RESOURCE_GPUs =\n", V100S)
    assert not facts.gpus_resource and "GPUs" not in carved(facts)["slot1"]


def test_machine_resource_names_without_gpus_drops_them() -> None:
    facts = detect("MACHINE_RESOURCE_NAMES = Bar\nMACHINE_RESOURCE_Bar = 2\n", V100S)
    assert not facts.gpus_resource
    assert gpu_attrs(facts) == {"MachineResources": "Cpus Memory Disk Swap Bar"}
    assert params("MACHINE_RESOURCE_NAMES = gpus\n").gpu_discovery == f"{DISCOVERY} -properties"


def test_an_inventory_may_count_instances_without_ids() -> None:
    """`Detected<name> = <number>`: that many, without ids (condor_startd takes it so)."""
    inv = FixtureHostReader(FIXTURES / "h100-node",
                            commands={"/inv": CommandResult(0, "DetectedFPGA = 3\n", "")})
    fpga = run_inventory(inv, "FPGA", "/inv")
    assert (fpga.count, fpga.instances, fpga.inventory) == (3, (), False)
    facts = detect("", "DetectedGPUs = 2\n")
    assert (facts.gpus, facts.custom["GPUs"].count) == ((), 2)
    assert gpu_attrs(facts)["DetectedGPUs"] == 2 and gpu_attrs(facts)["TotalGPUs"] == 2
    bad = FixtureHostReader(FIXTURES / "h100-node",
                            commands={"/inv": CommandResult(0, "DetectedFPGA = -1\n", "")})
    with pytest.raises(ResourceError, match="or a number, got 'DetectedFPGA = -1'"):
        run_inventory(bad, "FPGA", "/inv")
