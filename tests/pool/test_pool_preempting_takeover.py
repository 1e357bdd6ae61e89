"""A waiting preempting claim takes the slot only if START lets it, as on condor_startd
25.14.1 in the same pool (Resource::leave_preempting_state).

Once the preempted job is gone, condor_startd evaluates START against the waiting
claim's job: defined and false, the claim is refused (the schedd's REQUEST_CLAIM
answered NOT_OK, "preempting claim refused - START is false") and the slot goes to
Owner, then Unclaimed. A graceful drain leaves the waiting claim be: the drain's START
(False) refuses it only when the retirement is over. The ranked job never runs (its
user log holds its submission alone); the preempted job ends on its own (005).
"""

from __future__ import annotations

import dataclasses
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import WAIT_S, PoolNode, start_node
from test_pool_daemon import administrators
from test_pool_jobs import timeless
from test_pool_preemption import (
    RANKED,
    RETIRE_SCRIPT,
    RETIRING,
    claimant,
    early_preemption,
    job_status,
    ranked_claim_waiting,
    reference_slot_layout,
    slot1_moves,
    slot_ad,
)

# The ranked job may start only on a busy slot: the negotiator matches it to the
# submitter's running job (Claimed/Busy); when that job is gone the slot is not busy.
GUARDED = dataclasses.replace(RETIRING, execd=RETIRING.execd + (
    f'START = TARGET.Owner != "{RANKED}" || MY.Activity == "Busy"\n'))  # fmt: skip


def ranked_job_refused(pool: harness.Pool, node: PoolNode | None,
                       during: Callable[[dict[str, Any]], None],
                       final: str) -> tuple[Any, ...]:  # fmt: skip
    """The submitter's job runs; execdrank's (ranked higher) preempts it and waits while
    it retires; `during(retiring ad)` happens; the job is let end (005); the slot ends up
    `final` with the ranked job refused: the user logs, the slot's moves."""
    start_log = len(pool.daemon_log("StartLog"))
    with ranked_claim_waiting(pool, RETIRE_SCRIPT) as (low, high, retiring, let_end):
        during(retiring)
        let_end()
        low.wait_for_event("005", WAIT_S)
        ended = slot_ad(pool, lambda ad: ad["State"] == final and claimant(ad) is None)
        assert "PreemptingUser" not in ended, ended
        assert job_status(high) == 1  # Idle: refused, never run
        if node is not None:
            (dropped,) = [e for e in node.events() if e["event"] == "preempting_claim_withdrawn"]
            assert dropped["why"] == "START is false", dropped
        return timeless(low.events()), timeless(high.events()), slot1_moves(pool, node, start_log)


def compared(running_pool: harness.RunningPool, during: Callable[[dict[str, Any]], None],
             final: str, extra: str = "") -> tuple[Any, ...]:  # fmt: skip
    """The scenario on execd, then on condor_startd laid out alike: both results."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, early_preemption(pool):
        node = start_node(pool, Path(tmp), extra + GUARDED.execd)
        try:
            ours = ranked_job_refused(pool, node, during(pool), final)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_slot_layout(reference, GUARDED), early_preemption(reference):
        theirs = ranked_job_refused(reference, None, during(reference), final)
    return ours, theirs


def test_start_false_at_the_takeover_refuses_the_preempting_claim(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """START, true for the ranked job while the slot was busy, is false once the job is
    gone: the slot goes Owner, then Unclaimed; the ranked job stays Idle, its log its
    submission alone; the same events and states as on condor_startd."""
    ours, theirs = compared(running_pool, lambda _pool: lambda _ad: None, "Unclaimed")
    assert ours == theirs
    assert ours[0][-1] == "005" and "004" not in ours[0], ours
    assert ours[1] == ["000"], ours
    assert ours[2] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                       "Owner/Idle", "Unclaimed/Idle"], ours  # fmt: skip


def test_a_drain_refuses_the_waiting_preempting_claim_when_the_retirement_ends(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """condor_drain while the job retires for the ranked claim: the claim waits on (the
    slot still advertises it); the job ends (005); the drain's START refuses the claim,
    the slot drains: the same events and states as on condor_startd."""

    def drain(pool: harness.Pool) -> Callable[[dict[str, Any]], None]:
        def during(retiring: dict[str, Any]) -> None:
            pool.tool("condor_drain", retiring["Name"]).check()
            drained = slot_ad(pool, lambda ad: "DrainReason" in ad)
            assert drained["Activity"] == "Retiring", drained
            assert drained.get("PreemptingUser", "").startswith(f"{RANKED}@"), drained
        return during

    ours, theirs = compared(running_pool, drain, "Drained", administrators(
        running_pool.get(with_startd=False)))  # fmt: skip
    assert ours == theirs
    assert ours[0][-1] == "005" and "004" not in ours[0], ours
    assert ours[1] == ["000"], ours
    assert ours[2][:4] == ["Claimed/Retiring", "Claimed/Cleaning", "Preempting/Vacating",
                           "Owner/Idle"], ours  # fmt: skip
    assert ours[2][-1] == "Drained/Idle", ours
