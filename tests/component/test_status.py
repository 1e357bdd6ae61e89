"""`execd status`: the slot table, -long, -af, -constraint, and --local computed from a
configuration and a recorded node (the H100 machine, through its recorded NVML)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from recorded_nodes import FIXTURES, RecordedNvml, h100_recording

from execd.classads import ClassAdError, ad_from_json, ad_to_json
from execd.cli.main import main
from execd.cli.status import local_ads, render
from execd.errors import ConfigError
from execd.machine.reader import FixtureHostReader
from execd.slots.status_view import duration


class DictConfig:
    """HTCondor's lookup order, enough for these tests: SLOT<N>_ before the plain name."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = {k.upper(): v for k, v in values.items()}

    def get(self, name: str, subsystem: str = "STARTD", slot: int | None = None,
            slot_type: int | None = None) -> str | None:
        for key in ([f"SLOT{slot}_{name}"] if slot else []) + (
                [f"SLOT_TYPE_{slot_type}_{name}"] if slot_type else []) + [name]:
            if key.upper() in self.values:
                return self.values[key.upper()]
        return None


def h100() -> FixtureHostReader:
    return FixtureHostReader(FIXTURES / "h100-node", nvml=RecordedNvml(h100_recording()))


def ads_for(values: dict[str, str]) -> list[Any]:
    config = DictConfig({"EXECUTE": "/tmp", **values})
    return local_ads(config, h100(), now=1_000_000, defined_names=config.values,
                     hostname="gpu1.example")


def args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"constraint": None, "autoformat": None, "long": False,
                                 "json": False, **kw})


def test_default_node_shows_one_partitionable_slot_with_everything() -> None:
    out = render(ads_for({}), args())
    lines = out.splitlines()
    assert lines[0].split() == ["Name", "OpSys", "Arch", "State", "Activity", "LoadAv", "Mem",
                                "ActvtyTime"]
    assert lines[2].split() == ["slot1@gpu1.example", "LINUX", "X86_64", "Unclaimed", "Idle",
                                "0.140", str(131981020 // 1024), "0+00:00:00"]
    assert lines[-1].split()[:4] == ["Total", "1", "0", "0"]


def test_autoformat_shows_gpu_and_resource_attributes() -> None:
    out = render(ads_for({}), args(autoformat=["Name", "Cpus", "GPUs", "AssignedGPUs",
                                               "TotalSlotDisk", "PartitionableSlot"]))
    assert out == "slot1@gpu1.example 16 1 GPU-ed351562 67089804 true\n"


def test_local_pslot_shows_its_empty_rollup_and_lists_as_condor_status() -> None:
    values = {"MACHINE_RESOURCE_Cogs": "4", "STARTD_PARTITIONABLE_SLOT_ATTRS": "Foo"}
    out = render(ads_for(values), args(autoformat=[
        "PslotRollupInformation", "NumDynamicSlots", "ChildCpus", "ChildCogs", "ChildFoo"]))
    assert out == "true 0 {  } {  } {  }\n"
    quiet = ads_for({**values, "ADVERTISE_PSLOT_ROLLUP_INFORMATION": "false"})
    out = render(quiet, args(autoformat=["PslotRollupInformation", "NumDynamicSlots",
                                         "ChildCpus"]))  # fmt: skip
    assert out == "undefined 0 undefined\n"


def test_static_slots_with_gpu_constraint_and_custom_resource() -> None:
    values = {
        "MACHINE_RESOURCE_Cogs": "4",
        "NUM_SLOTS_TYPE_1": "1",
        "SLOT_TYPE_1": "Cpus = 8\nGPUs = 1 : Capability >= 8.0\nCogs = 3\n50%",
        "NUM_SLOTS_TYPE_2": "2",
        "SLOT_TYPE_2": "cpus=4, mem=25%",
        "STARTD_ATTRS": "favorite_color",
        "favorite_color": '"blue"',
        "SLOT2_favorite_color": '"green"',
        "STARTD_SLOT_ATTRS": "State",
    }
    out = render(ads_for(values), args(autoformat=[
        "Name", "Cpus", "GPUs", "AssignedGPUs", "Cogs", "favorite_color", "slot3_State"]))
    assert out.splitlines() == [
        "slot1@gpu1.example 8 1 GPU-ed351562 3 blue Unclaimed",
        "slot2@gpu1.example 4 0 undefined 0 green Unclaimed",  # not bound to a GPU
        "slot3@gpu1.example 4 0 undefined 0 blue Unclaimed",
    ]


def test_constraint_and_long() -> None:
    values = {"NUM_SLOTS": "4"}
    ads = ads_for(values)
    out = render(ads, args(constraint="SlotID >= 3", autoformat=["Name"]))
    assert out.split() == ["slot3@gpu1.example", "slot4@gpu1.example"]
    long = render(ads, args(constraint='Name == "slot2@gpu1.example"', long=True))
    assert "SlotID = 2\n" in long and 'State = "Unclaimed"\n' in long
    assert "slot1@" not in long


def test_json_keeps_gpu_lists_and_nested_ads_as_classad_values() -> None:
    """-json is HTCondor's JSON ClassAd form, and the live status (which crosses the
    control socket as that form) rebuilds the same ad: lists stay lists, nested GPU ads
    stay ads, expressions stay expressions."""
    out = render(ads_for({}), args(json=True))
    [slot] = json.loads(out)
    assert slot["Name"] == "slot1@gpu1.example"
    assert slot["AvailableGPUs"] == ["/Expr(GPUs_GPU_ed351562)/"]
    assert slot["GPUs_GPU_ed351562"]["Capability"] == 9.0
    assert slot["Requirements"] == "/Expr(START)/"
    back = ad_from_json(slot)
    assert back.eval("GPUs_GPU_ed351562").eval("DeviceName") == "NVIDIA H100 80GB HBM3"
    assert " ".join(str(back.lookup("AvailableGPUs")).split()) == "{ GPUs_GPU_ed351562 }"
    assert ad_to_json(back) == slot
    with pytest.raises(ClassAdError, match="not a JSON ClassAd"):
        ad_from_json({"A": float("nan")} | {"B": {"C": [1, {"D": object}]}})


def test_impossible_layout_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="SLOT_TYPE_1: Cpus: the slots ask for 32 of 16"):
        ads_for({"NUM_SLOTS_TYPE_1": "2", "SLOT_TYPE_1": "cpus=16"})


def test_missing_execute_directory_falls_back_to_its_parent_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reader = FixtureHostReader(FIXTURES / "h100-node", missing_paths=("/var/lib/execd",))
    config = DictConfig({"EXECUTE": "/var/lib/execd/execute"})
    (ad,) = local_ads(config, reader, now=1, hostname="h")
    assert ad["TotalDisk"] == 67089804
    assert "EXECUTE /var/lib/execd/execute does not exist yet" in capsys.readouterr().err


def test_without_local_and_no_daemon_suggests_local(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status"]) == 1
    assert "execd status --local" in capsys.readouterr().err


def test_duration_format() -> None:
    assert duration(90061) == "1+01:01:01"
