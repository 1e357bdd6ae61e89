"""Which GPUs a job may not open (STARTER_HIDE_GPU_DEVICES), derived from the recorded
H100 node's NVML answers as condor_starter derives its exclude list, and carried into
the starter's spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recorded_nodes import RecordedNvml, h100_recording

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.starter_spec import starter_spec
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.facts import GpuInfo
from execd.machine.gpu_hiding import gpus_to_hide
from execd.machine.gpus import detect_gpus
from execd.machine.reader import CommandResult, FixtureHostReader
from execd.starter.spec import StarterSpec

H100 = "GPU-ed351562"


def eight_gpus() -> tuple[GpuInfo, ...]:
    """The H100 recording with seven more GPUs, minors 1-7, as on an 8-GPU node."""
    rec = h100_recording()
    first = rec["devices"][0]
    for n in range(1, 8):
        rec["devices"].append(dict(first, index=n, minor_number=n,
                                   uuid=f"GPU-{n}{n}{n}{n}{n}{n}{n}{n}-0000-0000-0000-000000000000"))
    return detect_gpus(RecordedNvml(rec))


def test_the_h100s_device_is_its_nvml_minor_number_under_the_nvidia_major(
    h100_nvml: RecordedNvml,
) -> None:
    (gpu,) = detect_gpus(h100_nvml)
    assert gpu.device == (195, 0)  # nvidia-smi -q said minor_number 0: /dev/nvidia0


def test_a_job_with_the_h100_hides_nothing_and_one_without_hides_it(
    h100_nvml: RecordedNvml,
) -> None:
    gpus = detect_gpus(h100_nvml)
    assert gpus_to_hide(gpus, [H100]) == ((), None)
    assert gpus_to_hide(gpus, []) == (((195, 0),), None)  # no GPU asked: none visible


def test_on_eight_gpus_a_job_is_denied_the_seven_not_its_own() -> None:
    gpus = eight_gpus()
    assigned = [gpus[2].id, gpus[5].id]
    hiding = gpus_to_hide(gpus, assigned)
    assert hiding.devices == tuple((195, n) for n in (0, 1, 3, 4, 6, 7))
    assert hiding.problem is None


def test_an_unknown_assigned_gpu_hides_nothing_and_says_so(h100_nvml: RecordedNvml) -> None:
    hiding = gpus_to_hide(detect_gpus(h100_nvml), ["GPU-00000000"])
    assert hiding.devices == ()  # as condor_starter: "Unknown GPU ..., skipping device hiding"
    assert hiding.problem is not None and "GPU-00000000" in hiding.problem


def test_a_gpu_without_a_minor_number_cannot_be_hidden_and_is_named() -> None:
    rec = h100_recording()
    second = dict(rec["devices"][0], index=1, uuid="GPU-6a96bd13-0000-0000-0000-000000000000")
    del second["minor_number"]  # NVML: NotSupported
    rec["devices"].append(second)
    gpus = detect_gpus(RecordedNvml(rec))
    assert gpus[1].device is None
    hiding = gpus_to_hide(gpus, [])
    assert hiding.devices == ((195, 0),)
    assert hiding.problem is not None and "GPU-6a96bd13" in hiding.problem


# The driver's information file, as it reads on a node (the H100's UUID; minor 3).
INFORMATION = """Model: \t\t NVIDIA H100 80GB HBM3
IRQ:   \t\t 42
GPU UUID: \t GPU-ed351562-b6da-78d5-6864-16084094a18f
Video BIOS: \t 96.00.99.00.01
Bus Type: \t PCIe
DMA Size: \t 52 bits
DMA Mask: \t 0xfffffffffffff
Bus Location: \t 0000:00:06.0
Device Minor: \t 3
GPU Excluded:\t No
"""


def test_without_nvmls_minor_number_the_drivers_proc_file_gives_it(node_copy: Any) -> None:
    """condor_starter's own source: /proc/driver/nvidia/gpus/<pci>/information."""
    root = node_copy("h100-node")
    info = root / "proc/driver/nvidia/gpus/0000:00:06.0/information"
    info.parent.mkdir(parents=True)
    info.write_text(INFORMATION)
    rec = h100_recording()
    del rec["devices"][0]["minor_number"]  # NVML: NotSupported
    nvml = RecordedNvml(rec)
    facts = detect_machine(FixtureHostReader(root, nvml=nvml),
                           DetectionParams(execute_dir="/tmp", hostname="h100"))
    assert [(g.id, g.device) for g in facts.gpus] == [(H100, (195, 3))]
    assert detect_gpus(nvml) == (GpuInfo(H100, facts.gpus[0].properties, None),)  # no reader


def test_gpus_named_in_the_config_have_no_device_to_hide() -> None:
    configured = (GpuInfo("GPU-aa11"), GpuInfo("GPU-bb22"))
    hiding = gpus_to_hide(configured, ["GPU-aa11"])
    assert hiding.devices == ()
    assert hiding.problem is not None and "GPU-bb22" in hiding.problem


def spec_for(config: str, gpus: tuple[GpuInfo, ...], assigned: str) -> StarterSpec:
    settings = load_settings(parse_config_text(config, filename="execd.conf", env={}))
    tree = CgroupTree(CgroupFS(), Hierarchy(Path("/sys/fs/cgroup"), frozenset()), "htcondor")
    facts: dict[str, Any] = {"Cpus": 1, "Memory": 100, "AssignedGPUs": assigned}
    return starter_spec("1.0", "slot1_1", {"Cmd": "/bin/true"}, facts, settings=settings,
                        execute=Path("/x"), tree=tree, workdir=Path("/w"), node_gpus=gpus)


def test_the_starter_spec_carries_the_devices_to_hide() -> None:
    gpus = eight_gpus()
    spec = spec_for("", gpus, f"{gpus[0].id}, {gpus[1].id}")
    assert spec.gpus == [gpus[0].id, gpus[1].id]
    assert spec.hide_devices == [[195, n] for n in range(2, 8)]
    assert spec.gpu_hiding_problem is None
    again = StarterSpec.from_dict(spec._asdict())  # as the starter reads it back
    assert again.hide_devices == spec.hide_devices


def test_starter_hide_gpu_devices_false_hides_nothing() -> None:
    spec = spec_for("STARTER_HIDE_GPU_DEVICES = false\n", eight_gpus(), "")
    assert spec.hide_devices == []
    assert spec.gpu_hiding_problem is None


def test_a_node_without_gpus_hides_nothing(hybrid_reader: FixtureHostReader) -> None:
    spec = spec_for("", detect_gpus(hybrid_reader.nvml()), "")
    assert (spec.hide_devices, spec.gpu_hiding_problem) == ([], None)


@pytest.mark.parametrize("bad", [[[195]], [[195, -1]], [["195", 0]], [[195, True]], "195:0"])
def test_a_bad_hide_devices_in_the_spec_is_refused_naming_it(bad: object) -> None:
    spec = spec_for("", (), "")._asdict()
    spec["hide_devices"] = bad
    with pytest.raises(ValueError, match="hide_devices"):
        StarterSpec.from_dict(spec)


def test_gpus_from_condor_gpu_discovery_get_their_device_from_the_drivers_proc_file(
        node_copy: Any) -> None:
    """`use feature : GPUs` reads condor_gpu_discovery, which names no device file: the
    driver's information file gives it by DeviceUuid, so that those GPUs are hidden too
    (condor_starter finds what to hide there, by the same UUID)."""
    root = node_copy("h100-node")
    info = root / "proc/driver/nvidia/gpus/0000:00:06.0/information"
    info.parent.mkdir(parents=True)
    info.write_text(INFORMATION)
    discovery = ('DetectedGPUs="GPU-ed351562"\n'
                 'Common=[ DeviceName="NVIDIA H100 80GB HBM3"; ]\n'
                 'GPU_ed351562=[ id="GPU-ed351562"; DevicePciBusId="0000:00:06.0"; '
                 'DeviceUuid="ed351562-b6da-78d5-6864-16084094a18f"; ]\n')
    reader = FixtureHostReader(root, commands={
        "/usr/libexec/condor/condor_gpu_discovery": CommandResult(0, discovery, "")})
    command = "/usr/libexec/condor/condor_gpu_discovery -properties"
    facts = detect_machine(reader, DetectionParams(
        execute_dir="/tmp", hostname="h100", machine_inventories={"GPUs": command}))
    assert [(g.id, g.device) for g in facts.gpus] == [(H100, (195, 3))]
    assert gpus_to_hide(facts.gpus, []).devices == ((195, 3),)
