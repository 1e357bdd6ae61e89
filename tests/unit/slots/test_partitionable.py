"""Carving dynamic slots from a partitionable slot, and giving resources back."""

from __future__ import annotations

import pytest

from execd.classads import new_ad, parse_expr
from execd.errors import ResourceError
from execd.machine.facts import CustomResource, GpuInfo, MachineFacts
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.partitionable import PartitionableSlot
from execd.slots.requests import RequestModifier, ResourceRequest

GPUS = (GpuInfo("GPU-aaaaaaaa", {"Capability": 7.5}), GpuInfo("GPU-bbbbbbbb", {"Capability": 9.0}))


def pslot() -> PartitionableSlot:
    facts = MachineFacts(detected_cpus=10, detected_cores=10, detected_memory_mb=10240,
                         total_cpus=10, total_memory_mb=10240, total_disk_kb=1_000_000,
                         total_vm_kb=0, gpus=GPUS,
                         custom={"Cogs": CustomResource("Cogs", 4)})
    (definition,) = build_layout(default_slot_types(), facts)
    props = {g.id: g.properties for g in GPUS}
    return PartitionableSlot(definition, disk_kb=facts.total_disk_kb, instance_props=props)


def job(**attrs: object) -> object:
    return new_ad({"RequestCpus": 1, "RequestMemory": 100, "RequestDisk": 1000, **attrs})


def test_seed_example_job_a_leaves_7_cpus_and_9216_mb() -> None:
    p = pslot()
    req = RequestModifier().request(job(RequestCpus=3, RequestMemory=1024, RequestDisk=10240))
    d = p.carve(req)
    assert (d.name, d.cpus, d.memory_mb, d.disk_kb) == ("slot1_1", 3, 1024, 10240)
    assert (p.free_cpus, p.free_memory_mb, p.free_disk_kb) == (7, 9216, 1_000_000 - 10240)


def test_default_modify_exprs_quantize_like_htcondor_25() -> None:
    req = RequestModifier().request(job(RequestCpus=1.5, RequestMemory=100, RequestDisk=1000))
    assert (req.cpus, req.memory_mb, req.disk_kb) == (2, 128, 1024)


def test_default_disk_quantum_is_the_slot_ads_disk_quantum() -> None:
    # HTCondor 25: quantize(RequestDisk - $(CATALOG_SPACE), {Target.DiskQuantum ?: 1024})
    # with the slot as TARGET; a job's own DiskQuantum changes nothing
    asked = job(RequestDisk=1000, DiskQuantum=7)
    assert RequestModifier().request(asked, new_ad({"DiskQuantum": 4096})).disk_kb == 4096
    assert RequestModifier().request(asked, new_ad({})).disk_kb == 1024
    assert RequestModifier().request(asked).disk_kb == 1024


def test_modify_expr_can_use_slot_attributes() -> None:
    mod = RequestModifier({"Memory": "quantize(RequestMemory, {TotalSlotMemory / TotalSlotCpus})"})
    slot_ad = new_ad({"TotalSlotMemory": 8192, "TotalSlotCpus": 8})
    req = mod.request(job(RequestMemory=1500), slot_ad)
    assert req.memory_mb == 2048


def test_missing_requests_get_the_smallest_unit() -> None:
    req = RequestModifier().request(new_ad({}))
    assert (req.cpus, req.memory_mb, req.disk_kb) == (1, 128, 1024)


def test_names_count_up_and_freed_numbers_are_reused_lowest_first() -> None:
    p = pslot()
    small = ResourceRequest(cpus=1, memory_mb=128, disk_kb=1024)
    names = [p.carve(small).name for _ in range(4)]
    assert names == ["slot1_1", "slot1_2", "slot1_3", "slot1_4"]
    p.release(3)
    p.release(2)
    assert [p.carve(small).name for _ in range(3)] == ["slot1_2", "slot1_3", "slot1_5"]


def test_release_returns_everything() -> None:
    p = pslot()
    d = p.carve(ResourceRequest(cpus=4, memory_mb=4096, disk_kb=5000,
                                custom={"GPUs": 1, "Cogs": 2}))
    assert d.custom["GPUs"].ids == ("GPU-aaaaaaaa",) and p.free_amounts["Cogs"] == 2
    p.release(d.sub_id)
    assert (p.free_cpus, p.free_memory_mb, p.free_disk_kb) == (10, 10240, 1_000_000)
    assert p.free_ids["GPUs"] == ["GPU-aaaaaaaa", "GPU-bbbbbbbb"]
    assert p.free_amounts == {"Cogs": 4, "GPUs": 2}


def test_gpu_request_constraint_picks_a_matching_id() -> None:
    p = pslot()
    req = RequestModifier().request(
        job(RequestGPUs=1, RequireGPUs=parse_expr("Capability >= 8.0")), custom_names=["GPUs"])
    assert p.carve(req).custom["GPUs"].ids == ("GPU-bbbbbbbb",)
    with pytest.raises(ResourceError, match=r"no 1 free GPUs match Capability >= 8\.0"):
        p.carve(req)


@pytest.mark.parametrize(("request_", "message"), [
    (ResourceRequest(cpus=11, memory_mb=1, disk_kb=1), "asks for 11 Cpus, 10 Cpus are left"),
    (ResourceRequest(cpus=1, memory_mb=20000, disk_kb=1), "asks for 20000 Memory"),
    (ResourceRequest(cpus=-1, memory_mb=1, disk_kb=1), "negative"),
    (ResourceRequest(cpus=1, memory_mb=1, disk_kb=1, custom={"Wheels": 1}), "does not have"),
    (ResourceRequest(cpus=1, memory_mb=1, disk_kb=1, custom={"GPUs": 3}), "asks for 3 GPUs"),
])
def test_requests_that_do_not_fit_change_nothing(request_: ResourceRequest, message: str) -> None:
    p = pslot()
    with pytest.raises(ResourceError, match=message):
        p.carve(request_)
    assert (p.free_cpus, p.free_memory_mb, p.dynamic) == (10, 10240, {})


@pytest.mark.parametrize(("attrs", "message"), [
    ({"RequestCpus": -2}, "RequestCpus = -2 is negative"),
    ({"RequestMemory": "lots"}, "RequestMemory = 'lots' is not a number"),
    ({"RequestGPUs": -1}, "RequestGPUs = -1 is negative"),
])
def test_bad_job_requests_are_clear_errors(attrs: dict[str, object], message: str) -> None:
    with pytest.raises(ResourceError, match=message):
        RequestModifier().request(job(**attrs), custom_names=["GPUs"])


def test_unknown_dynamic_slot_release_is_an_error() -> None:
    with pytest.raises(ResourceError, match="slot1 has no dynamic slot slot1_9"):
        pslot().release(9)
