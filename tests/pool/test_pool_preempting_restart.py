"""`execd restart` while a higher-RANK claim waits for the slot's retiring job.

The new image restores the claim that holds the slot (the running job's: adopted, its
claim and its lease) and drops the preempting claim that was waiting (its schedd's
REQUEST_CLAIM went with the old image's connection): which one is which comes from the
store's flag, not from the grants' wall times (tests/component/
test_preempting_claim_lifecycle.py steps the clock). The schedd gives that match up;
the negotiator matches the ranked job again, its new claim waits again, and takes the
slot when the retiring job ends on its own (005, never evicted). condor_startd has no
restart that keeps jobs running, so there is nothing to compare with.
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path

import pool_harness as harness
from pool_node import WAIT_S, start_node
from test_pool_jobs import timeless
from test_pool_preemption import (
    RANKED,
    RETIRE_SCRIPT,
    RETIRING,
    claimant,
    early_preemption,
    ranked_claim_waiting,
    slot_ad,
)


def test_execd_restart_keeps_the_running_claim_and_drops_the_waiting_one(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp, early_preemption(pool):
        node = start_node(pool, Path(tmp), RETIRING.execd)
        try:
            with ranked_claim_waiting(pool, RETIRE_SCRIPT) as (low, high, _retiring, let_end):
                restarted = node.execd("restart")
                assert restarted.returncode == 0, restarted.stderr
                assert "1 running jobs re-adopted" in restarted.stdout, restarted.stdout
                assert "1 claims restored" in restarted.stdout, restarted.stdout
                node.wait_for("preempting_claim_not_restored", slot="slot1")
                # the running job's claim holds the slot; the ranked job's new claim waits
                again = slot_ad(pool, lambda ad: ad["Activity"] == "Retiring"
                                and claimant(ad) == harness.SUBMITTER
                                and ad.get("PreemptingUser", "").startswith(f"{RANKED}@"))
                assert again["State"] == "Claimed", again
                let_end()
                low.wait_for_event("005", WAIT_S)
                high.wait_for_event("001", WAIT_S)
                busy = slot_ad(pool, lambda ad: ad["Activity"] == "Busy"
                               and claimant(ad) == RANKED)  # fmt: skip
                assert busy["State"] == "Claimed", busy
                assert "004" not in low.events(), low.user_log()
                assert timeless(low.events())[-1] == "005", low.user_log()
        finally:
            node.stop(signal.SIGQUIT)
