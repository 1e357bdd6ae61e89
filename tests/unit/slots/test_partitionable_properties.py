"""Carving and releasing in any order never loses or invents resources."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from execd.errors import ResourceError
from execd.machine.facts import CustomResource, GpuInfo, MachineFacts
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.partitionable import PartitionableSlot
from execd.slots.requests import ResourceRequest

GPUS = tuple(GpuInfo(f"GPU-0000000{i}", {"Capability": 8.0 + i}) for i in range(3))
FACTS = MachineFacts(detected_cpus=8, detected_cores=8, detected_memory_mb=8192, total_cpus=8,
                     total_memory_mb=8192, total_disk_kb=100_000, total_vm_kb=0, gpus=GPUS,
                     custom={"Cogs": CustomResource("Cogs", 5)})

carve = st.builds(
    ResourceRequest,
    cpus=st.integers(0, 4), memory_mb=st.integers(0, 3000), disk_kb=st.integers(0, 40_000),
    custom=st.fixed_dictionaries({"GPUs": st.integers(0, 2), "Cogs": st.integers(0, 3)}),
)
steps = st.lists(st.one_of(carve, st.integers(1, 10)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(steps)
def test_free_plus_carved_is_always_the_whole(ops: list[ResourceRequest | int]) -> None:
    (definition,) = build_layout(default_slot_types(), FACTS)
    p = PartitionableSlot(definition, disk_kb=100_000, instance_props={g.id: g.properties
                                                                       for g in GPUS})
    for op in ops:
        if isinstance(op, int):
            if op in p.dynamic:
                p.release(op)
            continue
        before = (p.free_cpus, p.free_memory_mb, p.free_disk_kb, dict(p.free_amounts),
                  list(p.free_ids["GPUs"]), len(p.dynamic))
        try:
            p.carve(op)
        except ResourceError:  # a refused carve changes nothing
            assert before == (p.free_cpus, p.free_memory_mb, p.free_disk_kb,
                              dict(p.free_amounts), list(p.free_ids["GPUs"]), len(p.dynamic))
        dyn = list(p.dynamic.values())
        assert p.free_cpus + sum(d.cpus for d in dyn) == 8
        assert p.free_memory_mb + sum(d.memory_mb for d in dyn) == 8192
        assert p.free_disk_kb + sum(d.disk_kb for d in dyn) == 100_000
        assert p.free_amounts["Cogs"] + sum(d.custom["Cogs"].amount for d in dyn) == 5
        held = [i for d in dyn for i in d.custom["GPUs"].ids]
        assert sorted(held + p.free_ids["GPUs"]) == [g.id for g in GPUS]
        assert len({d.name for d in dyn}) == len(dyn)
        assert min(p.free_cpus, p.free_memory_mb, p.free_disk_kb) >= 0
