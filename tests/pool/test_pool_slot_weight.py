"""The slot's SLOT_WEIGHT is what the pool charges a submitter for a claim of it: the
negotiator's accountant reads the SlotWeight the slot ad publishes (condor_userprio's
WeightedResourcesUsed). With the same SLOT_WEIGHT and retirement policy, a 2-CPU job on
`execd run` is charged as on the pool's own condor_startd, and both publish the same
policy expressions (and Requirements in the same words).
"""

from __future__ import annotations

import re

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, SLEEP_SCRIPT, on_both, submit_files
from test_pool_preemption import reference_config

POLICY = "SLOT_WEIGHT = 3 * Cpus\nMAXJOBRETIREMENTTIME = 2 * 60\nMachineMaxVacateTime = 45\n"
PUBLISHED = ("SlotWeight", "MaxJobRetirementTime", "MachineMaxVacateTime", "Requirements")


def weighted_use(pool: harness.Pool) -> tuple[float, dict[str, object]]:
    """A 2-CPU job runs: what the accountant charges its submitter, and the policy
    attributes of the partitionable slot."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra="request_cpus = 2"),
                       {"job.sh": SLEEP_SCRIPT})  # fmt: skip
    try:
        job.wait_for_event("001", WAIT_S)

        def charged() -> float:
            text = pool.tool("condor_userprio", "-allusers", "-l").stdout
            found = re.findall(r"^WeightedResourcesUsed = ([0-9.]+)$", text, re.M)
            return max((float(v) for v in found), default=0.0)

        used: float = harness.wait_for("the submitter charged", charged, WAIT_S, 0.5)
        pslot = next(ad for ad in pool.status("-slots")
                     if ad.get("SlotType") == "Partitionable")  # fmt: skip
        return used, {name: pslot.get(name) for name in PUBLISHED}
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_claim_is_charged_its_slot_weight_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, weighted_use, POLICY, lambda pool: reference_config(
        pool, "99-execd-slot-weight.conf", POLICY,
        lambda ad: ad.get("SlotWeight") != "/Expr(Cpus)/"))
    assert ours == theirs
    assert ours == (6.0, {"SlotWeight": "/Expr(3 * Cpus)/",
                          "MaxJobRetirementTime": "/Expr(2 * 60)/",
                          "MachineMaxVacateTime": 45,
                          "Requirements": "/Expr(Start && WithinResourceLimits)/"})
