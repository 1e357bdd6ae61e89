"""WithinResourceLimits under its knobs, compared with condor_startd's in the same pool:
STARTD_JOB_HAS_REQUEST_ATTRS = true builds the older form that reads a job's
_condor_Request<Res> first, and the knob WithinResourceLimits (the attribute's name, as
START; HTCondor has no WITHIN_RESOURCE_LIMITS) replaces the expression; both
execute points publish the same text on their partitionable slot (Requirements = Start &&
WithinResourceLimits either way). What the forms match is tests/unit/wire/test_startd_ads.py's.
"""

from __future__ import annotations

from typing import Any

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both
from test_pool_preemption import reference_config

KNOBS = {
    "request-attrs": "STARTD_JOB_HAS_REQUEST_ATTRS = true\n",
    "configured": "WithinResourceLimits = TARGET.RequestMemory <= MY.Memory && MY.Cpus >= 1\n",
}
# What tells the knob's form from the default one
MARK = {"request-attrs": "_condor_RequestCpus", "configured": "MY.Cpus >= 1"}


def limits(pool: harness.Pool) -> tuple[str, str]:
    """The p-slot's (WithinResourceLimits, Requirements)."""
    (slot,) = harness.wait_for("one slot", lambda: pool.status("-slots"), WAIT_S, 0.2)
    return str(slot["WithinResourceLimits"]), str(slot["Requirements"])


@pytest.mark.parametrize("knob", sorted(KNOBS))
def test_within_resource_limits_knobs_as_on_condor_startd(
        running_pool: harness.RunningPool, knob: str) -> None:  # fmt: skip
    def applied(ad: dict[str, Any]) -> bool:
        return MARK[knob] in str(ad.get("WithinResourceLimits"))

    ours, theirs = on_both(running_pool, limits, KNOBS[knob], lambda pool: reference_config(
        pool, "99-execd-limits.conf", KNOBS[knob], applied))
    assert ours == theirs
    assert MARK[knob] in ours[0] and "WithinResourceLimits" in ours[1]
