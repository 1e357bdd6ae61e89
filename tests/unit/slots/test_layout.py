"""Slot layout from SLOT_TYPE_<N> specs (seed 003, Dividing System Resources)."""

from __future__ import annotations

import pytest

from execd.errors import ConfigError
from execd.machine.facts import CustomResource, GpuInfo, MachineFacts
from execd.slots.layout import SlotTypeInput, build_layout, default_slot_types


def facts(cpus: int = 4, memory: int = 256, gpus: tuple[GpuInfo, ...] = (),
          custom: dict[str, CustomResource] | None = None) -> MachineFacts:
    return MachineFacts(detected_cpus=cpus, detected_cores=cpus, detected_memory_mb=memory,
                        total_cpus=cpus, total_memory_mb=memory, total_disk_kb=1_000_000,
                        total_vm_kb=4096, gpus=gpus, custom=custom or {})


def gpu(short: str, cap: float) -> GpuInfo:
    return GpuInfo(id=short, properties={"Capability": cap, "DeviceName": "X"})


def layout(*types: SlotTypeInput, f: MachineFacts | None = None) -> list[tuple[float, int, float]]:
    return [(d.cpus, d.memory_mb, d.disk_fraction) for d in build_layout(types, f or facts())]


def test_default_is_one_partitionable_slot_with_everything() -> None:
    (slot,) = build_layout(default_slot_types(), facts())
    assert (slot.name, slot.partitionable, slot.cpus, slot.memory_mb) == ("slot1", True, 4, 256)
    assert (slot.disk_fraction, slot.swap_fraction) == (1.0, 1.0)


def test_num_slots_gives_even_slots_of_type_0_partitionable_unless_configured_not() -> None:
    """As condor_startd 25 (slot_builder's countTypes): SLOT_TYPE_0_PARTITIONABLE defaults
    to true, and NUM_SLOTS to one such slot, or to one static slot per CPU."""
    def layout(types: list[SlotTypeInput]) -> list[tuple[object, ...]]:
        return [(d.name, d.type_id, d.partitionable, d.cpus, d.memory_mb)
                for d in build_layout(types, facts())]  # fmt: skip

    assert layout(default_slot_types(num_slots=4)) == [
        (f"slot{i}", 0, True, 1, 64) for i in range(1, 5)]
    assert layout(default_slot_types(partitionable=False)) == [
        (f"slot{i}", 0, False, 1, 64) for i in range(1, 5)]
    assert layout(default_slot_types(num_slots=2, partitionable=False)) == [
        (f"slot{i}", 0, False, 2, 128) for i in range(1, 3)]


@pytest.mark.parametrize("spec", [
    "cpus=2, ram=128, swap=25%, disk=1/2", "cpus=1/2, memory=128, virt=25%, disk=50%",
    "c=1/2, m=50%, v=1/4, disk=1/2",
])
def test_seed_examples_types_1_to_3_are_equivalent(spec: str) -> None:
    (d,) = build_layout([SlotTypeInput(1, spec, 1)], facts())
    assert (d.cpus, d.memory_mb, d.swap_fraction, d.disk_fraction) == (2, 128, 0.25, 0.5)


@pytest.mark.parametrize("spec", ["c=25%, m=64, v=1/4, d=25%", "25%", "1/4"])
def test_seed_examples_types_4_to_6_are_equivalent(spec: str) -> None:
    (d,) = build_layout([SlotTypeInput(1, spec, 1)], facts())
    assert (d.cpus, d.memory_mb, d.swap_fraction, d.disk_fraction) == (1, 64, 0.25, 0.25)


def test_auto_divides_what_explicit_shares_leave() -> None:
    got = layout(SlotTypeInput(1, "cpus=1, mem=10%", 1), SlotTypeInput(2, "", 3))
    assert got[0][:2] == (1, 25)
    assert [g[:2] for g in got[1:]] == [(1, 77)] * 3  # (256 - 25) / 3 = 77


def test_blanket_default_with_explicit_auto() -> None:
    (d,) = build_layout([SlotTypeInput(1, "cpus=1, disk=auto, 50%", 1)], facts())
    assert (d.cpus, d.memory_mb, d.swap_fraction, d.disk_fraction) == (1, 128, 0.5, 1.0)


def test_custom_resources_by_name_not_first_letter() -> None:
    f = facts(custom={"Cogs": CustomResource("Cogs", 4), "Actuator": CustomResource("Actuator", 8)})
    defs = build_layout([SlotTypeInput(1, "cogs=50%,actuator=6,50%", 1, partitionable=True),
                         SlotTypeInput(2, "cogs=25%,actuator=1,25%", 2)], f)
    assert [(d.cpus, d.custom["Cogs"].amount, d.custom["Actuator"].amount) for d in defs] == [
        (2, 2, 6), (1, 1, 1), (1, 1, 1)]


def test_gpu_constraints_pick_matching_ids() -> None:
    f = facts(gpus=(gpu("GPU-aaaaaaaa", 7.5), gpu("GPU-bbbbbbbb", 8.0), gpu("GPU-cccccccc", 9.0),
                    gpu("GPU-6a96bd13", 8.6)))
    spec1 = "\n  Cpus = 2\n  GPUs = 2 : Capability >= 8.0\n  25%\n"
    spec2 = 'Cpus = 1\nGPUs = 1 : "GPU-6a96bd13"\n'
    defs = build_layout([SlotTypeInput(1, spec1, 1), SlotTypeInput(2, spec2, 1),
                         SlotTypeInput(3, "cpus=1", 1)], f)
    assert [d.custom["GPUs"].ids for d in defs] == [
        ("GPU-bbbbbbbb", "GPU-cccccccc"), ("GPU-6a96bd13",), ("GPU-aaaaaaaa",)]


@pytest.mark.parametrize(("types", "message"), [
    ([SlotTypeInput(1, "cpus=3", 1), SlotTypeInput(2, "cpus=2", 1)],
     "SLOT_TYPE_2: Cpus: the slots ask for 5 of 4"),
    ([SlotTypeInput(1, "mem=60%", 2)], "SLOT_TYPE_1: Memory: the slots ask for"),
    ([SlotTypeInput(1, "disk=150%", 1)], "SLOT_TYPE_1, Disk: '150%' is more than 100%"),
    ([SlotTypeInput(1, "wheels=1", 1)], "SLOT_TYPE_1: unknown resource 'wheels'"),
    ([SlotTypeInput(1, "", 8)], "SLOT_TYPE_1: Cpus: a slot would get 0 CPUs"),
    ([SlotTypeInput(1, "mem=lots", 1)], "SLOT_TYPE_1, Memory: 'lots' is not a fraction"),
    ([SlotTypeInput(1, "GPUs = 1 : Capability >= 10", 1)],
     "SLOT_TYPE_1: GPUs: cannot find 1 of GPUs matching Capability >= 10"),
    ([SlotTypeInput(1, "GPUs = 1 : Capability >=", 1)], "SLOT_TYPE_1, GPUs: bad constraint"),
    ([SlotTypeInput(1, "", 0)], "no slots"),
])
def test_impossible_layouts_name_slot_type_and_resource(
    types: list[SlotTypeInput], message: str
) -> None:
    f = facts(gpus=(gpu("GPU-aaaaaaaa", 8.0),))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_layout(types, f)


def test_num_slots_more_than_cpus_is_refused() -> None:
    with pytest.raises(ConfigError, match="NUM_SLOTS: Cpus: a slot would get 0 CPUs"):
        build_layout(default_slot_types(num_slots=8), facts(cpus=4))
