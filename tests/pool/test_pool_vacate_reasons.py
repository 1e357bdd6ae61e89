"""Why the startd evicted a job, as its shadow's 004 event says it (VacateReason & co.,
execd/daemon/vacate_reasons.py), compared with condor_startd 25.14.1 in the same pool:
condor_vacate and condor_drain, graceful and fast, the PREEMPT expression, and the
execute point's own shutdown (condor_off -startd, graceful and -fast). Before, execd gave
no reason for any of them and the 004 said "Unspecified job interruption" (1005).

The schedd's RELEASE_CLAIM of a claim whose job runs ("Schedd released the claim",
1017) reaches no 004: the schedd sends it when the job's shadow is gone (killed here),
so it is compared where it shows, in the startd's STARTD_HISTORY record of that run.

A drained job suspended during its retirement and continued is told no reason on both
(condor_startd clears it as the job leaves Retiring for Suspended)."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import PoolNode, pool_slots
from test_pool_daemon import WAIT_S, administrators
from test_pool_jobs import PLAIN_SUBMIT, SLEEP_SCRIPT, on_both, pool_node, submit_files
from test_pool_preemption import REFERENCE_NODE, SLEEP, evicted_lines, reference_config, slot_ad
from test_pool_startd_history import STARTD_HISTORY, records

# PREEMPT true 4 s into a job, which is not suspended first
PREEMPTING = "PREEMPT = (time() - JobStart) > 4\nWANT_SUSPEND = False\n"
REFERENCE_CONFIG = "99-execd-vacate-reasons.conf"
# A job that outlives a soft kill (SIGTERM ignored, as exec keeps it): only a hard one ends it
STUBBORN = {"job.sh": "#!/bin/sh\ntrap '' TERM\necho started\nexec sleep 300\n"}
NODE_HISTORY = "state/log/startd_history"  # under an execd node's root
MARK = "VacateReasonsTest = true\nSTARTD_ATTRS = $(STARTD_ATTRS) VacateReasonsTest\n"


def eviction_reasons(pool: harness.Pool, tool: str) -> dict[str, list[str]]:
    """`tool` (condor_vacate -all, condor_drain slot1@...), -graceful and -fast, of a
    running job: the 004 event's code line and reason, each."""
    seen = {}
    for how in ("graceful", "fast"):
        job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SLEEP_SCRIPT})
        try:
            job.wait_for_event("001", WAIT_S)
            if tool == "condor_vacate":
                pool.tool("condor_vacate", *(["-fast"] if how == "fast" else []), "-all").check()
            else:
                name = next(n for n in pool_slots(pool) if n.startswith("slot1@"))
                pool.tool("condor_drain", f"-{how}", name).check()
            seen[how] = evicted_lines(job.wait_for_event("004", 2 * WAIT_S))
            if tool == "condor_drain":
                pool.tool("condor_drain", "-cancel", name).check()
        finally:
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
    return seen


@pytest.mark.parametrize(("tool", "code", "reason"), [
    ("condor_vacate", 1010, "Claim vacated by the administrator"),  # StartdVacateCommand
    ("condor_drain", 1014, "Startd was draining"),  # StartdDraining
])  # fmt: skip
def test_the_shadow_is_told_why_as_by_condor_startd(running_pool: harness.RunningPool,
                                                    tool: str, code: int, reason: str) -> None:
    """The evicted job's 004 gives condor_startd's reason and code on both execute
    points, for a graceful and a fast vacate or drain (execd's said "Unspecified job
    interruption", 1005, before)."""
    admins = administrators(running_pool.get(with_startd=False))
    ours, theirs = on_both(running_pool, lambda pool: eviction_reasons(pool, tool), admins)
    assert ours == theirs
    assert ours == {how: [f"Job was evicted. Code {code} Subcode 0", f"Reason: {reason}"]
                    for how in ("graceful", "fast")}, ours  # fmt: skip


def preempted(pool: harness.Pool) -> list[str]:
    """A job the PREEMPT expression evicts: the 004 event's code line and reason."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP)
    try:
        job.wait_for_event("001", WAIT_S)
        return evicted_lines(job.wait_for_event("004", 2 * WAIT_S))
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_job_preempt_evicts_is_told_why_as_by_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, preempted, PREEMPTING, lambda pool: reference_config(
        pool, REFERENCE_CONFIG, REFERENCE_NODE + PREEMPTING + MARK,
        lambda ad: ad.get("VacateReasonsTest") is True))  # fmt: skip
    assert ours == theirs
    assert ours == ["Job was evicted. Code 1011 Subcode 0",
                    "Reason: PREEMPT expression evaluated to True"], ours  # StartdPreemptExpression


def run_record(pool: harness.Pool, history: Path, global_job_id: str) -> dict[str, Any]:
    """The first STARTD_HISTORY record (`history`) of the job's runs: its vacate reason
    code and the badput flags condor_startd adds when the starter exits."""

    def record() -> dict[str, Any] | None:
        if not history.exists():
            return None
        ads, _banners = records(pool, history)
        return next((r for r in ads if r["GlobalJobId"] == global_job_id), None)

    run = harness.wait_for(f"{global_job_id}'s run in STARTD_HISTORY", record, 2 * WAIT_S)
    return {k: run.get(k) for k in ("VacateReasonCode", "BadputCausedByPreemption",
                                    "BadputCausedByDraining")}  # fmt: skip


def shut_down_under_a_job(pool: harness.Pool, how: str, node: PoolNode | None,
                          history: Path) -> tuple[list[str], dict[str, Any]]:  # fmt: skip
    """The pool's only execute point shut down (`how` "graceful" or "fast") while a job
    runs on it, as condor_master shuts its startd down for condor_off -startd [-fast]
    (SIGTERM, SIGQUIT): `node`, execd, gets the signal; None: condor_off -startd to the
    master's condor_startd, turned on again afterwards. The job's 004 (code line,
    reason) and its run's record in `history` (run_record)."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP)
    try:
        job.wait_for_event("001", WAIT_S)
        ad = job.ad()
        assert ad is not None
        if node is None:
            pool.tool("condor_off", *(["-fast"] if how == "fast" else []), "-startd").check()
        else:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGQUIT if how == "fast" else signal.SIGTERM)
        lines = evicted_lines(job.wait_for_event("004", 2 * WAIT_S))
        return lines, run_record(pool, history, ad["GlobalJobId"])
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
        if node is None:
            pool.tool("condor_on", "-startd").check()
            slot_ad(pool, lambda ad: ad.get("State") == "Unclaimed")


@pytest.mark.parametrize("how", ["graceful", "fast"])
def test_a_shutdown_tells_the_shadow_why_as_condor_startd(running_pool: harness.RunningPool,
                                                          how: str) -> None:
    """A shutdown (condor_startd's main_shutdown_graceful: releaseAllClaims, its
    retire_claim; _fast: killAllClaims, kill_claim): the 004 says "Startd was shutdown"
    (StartdShutdown, 1013) on both; execd's said "Unspecified job interruption" (1005)
    before. The run's STARTD_HISTORY record has the same BadputCausedByPreemption on
    both (condor_startd sets it as the graceful shutdown's retirement ends, not for the
    fast one's kill)."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            ours = shut_down_under_a_job(pool, how, node, node.root / NODE_HISTORY)
            assert node.proc is not None and node.proc.wait(WAIT_S) == 0
        finally:
            node.stop()
    reference = running_pool.get(with_startd=True)
    theirs = shut_down_under_a_job(reference, how, None, reference.host_path(STARTD_HISTORY))
    assert ours == theirs
    assert ours[0] == ["Job was evicted. Code 1013 Subcode 0",
                       "Reason: Startd was shutdown"], ours  # fmt: skip


def evictions_badput(pool: harness.Pool, history: Path) -> dict[str, dict[str, Any]]:
    """condor_vacate and condor_drain, graceful and -fast, each of a running job: its
    evicted run's record in `history` (run_record)."""
    seen = {}
    for tool in ("condor_vacate", "condor_drain"):
        for how in ("graceful", "fast"):
            job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""),
                               {"job.sh": SLEEP_SCRIPT})  # fmt: skip
            name = ""
            try:
                job.wait_for_event("001", WAIT_S)
                ad = job.ad()
                assert ad is not None
                if tool == "condor_vacate":
                    fast = ["-fast"] if how == "fast" else []
                    pool.tool("condor_vacate", *fast, "-all").check()
                else:
                    name = next(n for n in pool_slots(pool) if n.startswith("slot1@"))
                    pool.tool("condor_drain", f"-{how}", name).check()
                job.wait_for_event("004", 2 * WAIT_S)
                seen[f"{tool} {how}"] = run_record(pool, history, ad["GlobalJobId"])
            finally:
                if name:
                    pool.tool("condor_drain", "-cancel", name)
                pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
    return seen


def test_an_evictions_badput_is_recorded_as_by_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """condor_startd sets BadputCausedByPreemption from its policy (ResState's
    change_to_suggested_state: a retirement's end while not draining, PREEMPT, KILL),
    never for a kill_claim: a graceful condor_vacate retires the claim (true once the
    retirement ends), condor_vacate -fast kills it (false); a drain's badput is the
    drain's (BadputCausedByDraining). execd's flag came from the vacate reason, and a
    fast vacate said true."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, administrators(pool))
        try:
            ours = evictions_badput(pool, node.root / NODE_HISTORY)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    theirs = evictions_badput(reference, reference.host_path(STARTD_HISTORY))
    assert ours == theirs, (ours, theirs)
    assert theirs["condor_vacate fast"]["BadputCausedByPreemption"] is False, theirs


def shadow_of(pool: harness.Pool, cluster: int) -> int:
    """The pid of the condor_shadow of job `cluster`.0 (its argv names the job)."""
    for pid in pool.chroot_pids():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone
        if argv[0].endswith(b"condor_shadow") and f"{cluster}.0".encode() in argv:
            return pid
    raise AssertionError(f"no condor_shadow of job {cluster}.0 runs")


def released_under_a_job(pool: harness.Pool, history: Path) -> dict[str, Any]:
    """A job's shadow killed while its job runs: the schedd, left with a claim no shadow
    uses, sends RELEASE_CLAIM (condor_startd logs "received RELEASE_CLAIM command" in
    Claimed/Busy). The STARTD_HISTORY record (`history`) of that run: its VacateReason*
    and BadputCausedByPreemption.

    The job ignores SIGTERM: the schedd's next shadow for the claim, refused, sends a
    DEACTIVATE_CLAIM first (condor_startd tells its starter "Claim deactivated", 1009,
    with the soft kill), and a job that ended on it could send its final update before
    the RELEASE_CLAIM's reason reached the starter (1009 or 1017 on condor_startd,
    measured); this one ends only by the RELEASE_CLAIM's hard kill."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), STUBBORN)
    try:
        job.wait_for_event("001", WAIT_S)
        ad = job.ad()
        assert ad is not None
        os.kill(shadow_of(pool, job.cluster), signal.SIGKILL)

        def record() -> dict[str, Any] | None:
            if not history.exists():
                return None
            ads, _banners = records(pool, history)
            return next((r for r in ads if r["GlobalJobId"] == ad["GlobalJobId"]), None)

        run = harness.wait_for("the killed shadow's run in STARTD_HISTORY", record, 2 * WAIT_S)
        return {k: run.get(k) for k in ("VacateReason", "VacateReasonCode", "VacateReasonSubCode",
                                        "BadputCausedByPreemption")}
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_released_claim_is_recorded_why_as_by_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """condor_startd's kill_claim for the schedd's RELEASE_CLAIM: the run's record says
    "Schedd released the claim" (StartdReleaseCommand, 1017) on both; execd's gave no
    reason before (condor_startd sometimes "Claim deactivated", 1009: below). No
    preemption's badput on either (BadputCausedByPreemption false: execd's said true
    once the release had a reason)."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            ours = released_under_a_job(pool, node.root / NODE_HISTORY)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    theirs = released_under_a_job(reference, reference.host_path(STARTD_HISTORY))
    assert ours == {"VacateReason": "Schedd released the claim", "VacateReasonCode": 1017,
                    "VacateReasonSubCode": 0, "BadputCausedByPreemption": False}, ours  # fmt: skip
    # condor_startd's own record races: where the RELEASE_CLAIM comes in the second of
    # the DEACTIVATE_CLAIM, its starter may die by the release's hard kill still holding
    # the deactivation's reason (seen once, on a loaded CI machine).
    assert theirs in (ours, {**ours, "VacateReason": "Claim deactivated",
                             "VacateReasonCode": 1009}), theirs  # fmt: skip


# 25 s of retirement (a vacate time of 2 s leaves it whole); SUSPEND true from 6 s to 14 s
# into the job (wider than POLLING_INTERVAL, 5 s), which is then continued
SUSPENDED_IN_RETIREMENT = (
    "MAXJOBRETIREMENTTIME = 25\nMachineMaxVacateTime = 2\nWANT_SUSPEND = True\n"
    "SUSPEND = (time() - JobStart) > 6 && (time() - JobStart) < 14\n"
    "CONTINUE = (time() - JobStart) >= 14\n")  # fmt: skip
SUSPENSION_MARK = ("VacateReasonsSuspend = true\n"
                   "STARTD_ATTRS = $(STARTD_ATTRS) VacateReasonsSuspend\n")


def drained_through_a_suspension(pool: harness.Pool) -> tuple[list[str], list[str]]:
    """condor_drain -graceful of a running job, suspended and continued during its
    retirement: the 004's code line and reason, and whether 010 and 011 came before it."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), SLEEP)
    name = ""
    try:
        job.wait_for_event("001", WAIT_S)
        name = next(n for n in pool_slots(pool) if n.startswith("slot1@"))
        pool.tool("condor_drain", "-graceful", name).check()
        log = job.wait_for_event("004", 3 * WAIT_S)
        return evicted_lines(log), [e for e in job.events() if e in ("010", "011", "004")]
    finally:
        if name:
            pool.tool("condor_drain", "-cancel", name)
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_drained_job_suspended_in_retirement_is_told_no_reason_as_by_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """Retiring -> Suspended -> Retiring, then the retirement's end: "Unspecified job
    interruption" (1005) on both; execd's said "Startd was draining" (1014) before."""
    admins = administrators(running_pool.get(with_startd=False))
    ours, theirs = on_both(
        running_pool, drained_through_a_suspension, admins + SUSPENDED_IN_RETIREMENT,
        lambda pool: reference_config(
            pool, REFERENCE_CONFIG, REFERENCE_NODE + SUSPENDED_IN_RETIREMENT + SUSPENSION_MARK,
            lambda ad: ad.get("VacateReasonsSuspend") is True))  # fmt: skip
    assert ours == theirs
    assert ours == (["Job was evicted. Code 1005 Subcode 0",
                     "Reason: Unspecified job interruption"], ["010", "011", "004"]), ours
