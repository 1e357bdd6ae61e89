"""An administrator's condor_vacate of `execd run` while condor_submit jobs run on it:
every claim is vacated (the jobs soft-killed through the policy engine, their d-slots
freed, the claims released to the schedd), the shadows requeue the jobs (004) and the
jobs run again to their end. A graceful vacate lets each job use its retirement time
first, as condor_startd's does.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pool_harness as harness
from pool_node import wait_pool
from test_pool_daemon import WAIT_S, administrators
from test_pool_jobs import (
    PLAIN_SUBMIT,
    SLEEP_SCRIPT,
    VACATE_SCRIPT,
    on_both,
    pool_node,
    submit_files,
    timeless,
)
from test_pool_preemption import reference_config

# Evicted once no more than the vacate time is left of the retirement: after ~18 s.
RETIREMENT = "MAXJOBRETIREMENTTIME = 20\nMachineMaxVacateTime = 2\n"


def test_condor_vacate_of_the_node_requeues_every_job_which_runs_again(
        pool: harness.Pool) -> None:  # fmt: skip
    admins = administrators(pool)
    tokens = [f"{os.getpid()}-{pool._jobs}-{n}" for n in range(2)]
    marks = [Path(f"/tmp/execd-vacate-{token}") for token in tokens]
    jobs: list[harness.SubmittedJob] = []
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, admins)
        try:
            for token in tokens:  # one CPU each: two d-slots
                jobs.append(submit_files(pool, PLAIN_SUBMIT.format(
                    args=token, extra="request_cpus = 1"), {"job.sh": VACATE_SCRIPT}))
            for job, mark in zip(jobs, marks, strict=True):
                job.wait_for_event("001", WAIT_S)
                harness.wait_for("the first run's mark", mark.exists, WAIT_S, 0.1)
            pool.tool("condor_vacate", "-addr", node.address()).check()
            vacated = node.wait_for("pool_vacated", fast=False, timeout=WAIT_S)
            assert sorted(vacated["slots"]) == ["slot1_1", "slot1_2"], vacated
            for _ in jobs:
                evicted = node.wait_for("job_finished", timeout=WAIT_S)
                assert evicted["reason"] == "soft_killed", evicted
            # freed, in either order: the claims ended and were released
            harness.wait_for("both d-slots deleted", lambda: {
                e.get("slot") for e in node.events()
                if e["event"] == "dynamic_slot_deleted"} >= {"slot1_1", "slot1_2"},
                WAIT_S, 0.1)  # fmt: skip
            assert len([e for e in node.events() if e["event"] == "pool_claim_ended"
                        and e["ended_by"] == "execd"]) == 2  # fmt: skip
            for job in jobs:
                log = job.wait_for_event("005", 2 * WAIT_S)
                assert "Normal termination (return value 0)" in log
                assert job.output("out.txt") == "second run\n"
                events = [e for e in timeless(job.events()) if e != "040"]  # transfers
                assert events == ["000", "001", "004", "001", "005"], job.user_log()
        finally:
            for mark in marks:
                mark.unlink(missing_ok=True)
            for job in jobs:
                pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
            node.stop(signal.SIGQUIT)
    # execd invalidated its ads as it stopped: the pool lists none of its slots
    try:
        harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)
    except harness.PoolError:
        listed = [(ad.get("Name"), ad.get("State")) for ad in pool.status("-slots")]
        raise AssertionError(f"still listed: {listed}; execd's last events: "
                             f"{node.events()[-12:]}") from None  # fmt: skip


def vacated_after_retirement(pool: harness.Pool) -> tuple[list[str], str, bool]:
    """condor_vacate -all of a running job with retirement time: its user-log events up
    to the eviction, its slot's state meanwhile, and whether it ran on through most of
    its retirement."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SLEEP_SCRIPT})
    try:
        job.wait_for_event("001", WAIT_S)
        vacated = time.monotonic()
        pool.tool("condor_vacate", "-all").check()
        retiring = wait_pool(pool, "the job's slot retiring", lambda slots: next((
            f"{ad['State']}/{ad['Activity']}" for ad in slots.values()
            if ad.get("Activity") == "Retiring"), None))  # fmt: skip
        assert "004" not in job.events()
        job.wait_for_event("004", 2 * WAIT_S)
        return timeless(job.events(), "004"), retiring, time.monotonic() - vacated > 12
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_graceful_condor_vacate_waits_for_retirement_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    admins = administrators(running_pool.get(with_startd=False))
    ours, theirs = on_both(running_pool, vacated_after_retirement, admins + RETIREMENT,
                           lambda pool: reference_config(
                               pool, "99-execd-retirement.conf", RETIREMENT,
                               lambda ad: ad.get("MaxJobRetirementTime") == 20))
    assert ours == theirs
    assert ours[1:] == ("Claimed/Retiring", True)


