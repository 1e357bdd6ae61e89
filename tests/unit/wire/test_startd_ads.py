"""The public slot ad the negotiator matches: Requirements = the slot's own && its
resource limits (WithinResourceLimits), as condor_startd publishes them. Evaluated by
the real ClassAd library against job ads as condor_submit writes their requests."""

from __future__ import annotations

from typing import Any

import classad2
import pytest

from execd.claims.ids import ClaimIdFactory
from execd.classads import evaluate, is_true
from execd.wire.classad_codec import to_classad
from execd.wire.startd_ads import advertised_pair

ADDRESS = "<127.0.0.1:9618>"


def _public(requirements: Any = True, **resources: Any) -> Any:
    slot = classad2.ClassAd({"MyType": "Machine", "Name": "slot1@host", "Cpus": 2,
                             "Memory": 1024, "Disk": 100000, "GPUs": 0, "Cogs": 1,
                             "MachineResources": "Cpus Memory Disk Swap GPUs Cogs",
                             "Requirements": requirements, **resources})  # fmt: skip
    public, _ = advertised_pair(slot, address=ADDRESS, claim_id=ClaimIdFactory(ADDRESS, 1).new())
    return to_classad(public)


def _matches(public: Any, **request: Any) -> bool:
    job = classad2.ClassAd({"RequestCpus": 1, "RequestMemory": 64, "RequestDisk": 10,
                            "Owner": "alice", **request})  # fmt: skip
    return is_true(evaluate(public.lookup("Requirements"), public, job))


def test_a_job_that_fits_matches() -> None:
    assert _matches(_public(), RequestCpus=2, RequestMemory=1024)
    assert _matches(_public(), RequestCogs=1, RequestGPUs=0)


@pytest.mark.parametrize(("resources", "asked"), [
    ({"Cpus": 0, "Memory": 896}, {}),  # a p-slot whose CPUs are all carved off
    ({}, {"RequestCpus": 3}),
    ({}, {"RequestMemory": 2048}),
    ({}, {"RequestDisk": 200000}),
    ({}, {"RequestGPUs": 1}),
    ({}, {"RequestCogs": 2}),  # a custom machine resource (MACHINE_RESOURCE_Cogs)
])  # fmt: skip
def test_a_job_beyond_the_slots_resources_does_not_match(
        resources: dict[str, Any], asked: dict[str, Any]) -> None:  # fmt: skip
    assert not _matches(_public(**resources), **asked)


def test_the_slots_own_requirements_still_apply() -> None:
    public = _public(classad2.ExprTree('TARGET.Owner == "bob"'))
    assert not _matches(public)
    assert _matches(public, Owner="bob")
    assert not _matches(_public(False))  # Matched, Preempting, Drained: nothing matches


def test_a_slot_open_to_its_start_says_so_in_condor_startds_words() -> None:
    start = classad2.ExprTree('TARGET.Owner == "bob"')
    public = _public(start, Start=start)
    assert str(public.lookup("Requirements")) == "Start && WithinResourceLimits"
    assert not _matches(public)
    assert _matches(public, Owner="bob")
    assert not _matches(public, Owner="bob", RequestCpus=3)


def test_a_pslots_private_ad_lists_its_dslots_offers_in_the_order_of_its_child_lists() -> None:
    """ChildClaimIds: each d-slot's offer (its preempting claim id), in the byte order of
    the names as the Child<Attr> lists (slot1_10 before slot1_2), and NumDynamicSlots,
    which the negotiator counts them against (ALLOW_PSLOT_PREEMPTION)."""
    ids = ClaimIdFactory(ADDRESS, 1)
    children = {"slot1_2": ids.new(), "slot1_10": ids.new(), "slot1_1": ids.new()}
    pslot = classad2.ClassAd({"MyType": "Machine", "Name": "slot1@host", "Cpus": 0,
                              "PartitionableSlot": True, "Requirements": True})  # fmt: skip
    public, private = advertised_pair(pslot, address=ADDRESS, claim_id=ids.new(),
                                      child_claim_ids=children)  # fmt: skip
    ad = to_classad(private)
    assert [str(c) for c in ad["ChildClaimIds"]] == [
        children[n].full() for n in ("slot1_1", "slot1_10", "slot1_2")]
    assert ad["NumDynamicSlots"] == 3
    assert "ChildClaimIds" not in public
    static = classad2.ClassAd({"MyType": "Machine", "Name": "slot2@host", "Requirements": True})
    _, private = advertised_pair(static, address=ADDRESS, claim_id=ids.new())
    assert "ChildClaimIds" not in private and "NumDynamicSlots" not in private


def _limits(**limits: Any) -> Any:
    slot = classad2.ClassAd({"MyType": "Machine", "Name": "slot1@host", "Cpus": 2,
                             "Memory": 1024, "Disk": 100000, "GPUs": 1,
                             "MachineResources": "Cpus Memory Disk Swap GPUs",
                             "Requirements": True})  # fmt: skip
    public, _ = advertised_pair(slot, address=ADDRESS, claim_id=ClaimIdFactory(ADDRESS, 1).new(),
                                limits=limits)  # fmt: skip
    return to_classad(public)


def test_within_resource_limits_knob_replaces_the_built_expression() -> None:
    public = _limits(configured="MY.Cpus >= 2")
    assert str(public.lookup("WithinResourceLimits")) == "MY.Cpus >= 2"
    assert _matches(public, RequestCpus=5)  # the operator's limits, not the slot's
    assert not _matches(_limits(configured="false"))


def test_job_request_attrs_override_the_requests_as_startd_job_has_request_attrs() -> None:
    public = _limits(job_has_request_attrs=True)
    text = str(public.lookup("WithinResourceLimits"))
    assert text.startswith("ifThenElse(TARGET._condor_RequestCpus isnt undefined")
    assert _matches(public, RequestCpus=5, _condor_RequestCpus=1)  # the override decides
    assert not _matches(public, _condor_RequestMemory=2048)
    assert not _matches(public, _condor_RequestGPUs=2, RequestGPUs=1)
    assert _matches(public, RequestGPUs=1)
    # without RequestCpus one CPU is asked; without RequestMemory nothing fits
    job = classad2.ClassAd({"RequestMemory": 64, "RequestDisk": 10})
    assert is_true(evaluate(public.lookup("Requirements"), public, job))
    job = classad2.ClassAd({"RequestCpus": 1, "RequestDisk": 10})
    assert not is_true(evaluate(public.lookup("Requirements"), public, job))
