"""The shadow's reconnect on `execd run`: a condor_submit job keeps running through its
schedd's restart (the new shadow's CA_LOCATE_STARTER and CA_RECONNECT_JOB reach execd)
and ends with the user log condor_startd gives the same job (022, 023, 005).
"""

from __future__ import annotations

import signal
import tempfile

import pool_harness as harness
from test_pool_daemon import PoolNode
from test_pool_jobs import NOBODY, comm, held_claim_id, job_pids, pool_node, uid_of
from test_shadow_pool import WAIT_S, reconnect_outcome, restart_schedd, run_on_condor_startd


def starters(node: PoolNode) -> list[str]:
    """The jobs execd spawned a starter for."""
    return [str(e["job"]) for e in node.events() if e["event"] == "starter_spawned"]


def test_a_schedd_restart_mid_job_reattaches_on_execd_run_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """condor_restart -schedd while the job sleeps on `execd run`: the new shadow
    reconnects (CA_CMD), the job is not restarted (one starter, the same job process in
    the same cgroup throughout), its output comes back, and its user log is the one
    condor_startd gives the same job: ... 022, 023, 005."""
    pool = running_pool.get(with_startd=False)
    seen: dict[str, list[int]] = {}

    def restart_and_watch(pool: harness.Pool, job: harness.SubmittedJob) -> None:
        restart_schedd(pool, job)  # waits for 001 first
        seen["before"] = sleeping(node)
        job.wait_for_event("023", WAIT_S)
        seen["after"] = sleeping(node)

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            job = run_on_condor_startd(pool, "sleep 25", during=restart_and_watch)
            ours = reconnect_outcome(job)
            located = node.wait_for("ca_locate_starter", found=True)
            reconnected = node.wait_for("shadow_reconnected")
            assert located["job"] == reconnected["job"]
            finished = node.wait_for("job_finished", slot="slot1_1", reason="exited")
            # one starter, which ran the job to its end: the job was not run again
            assert starters(node) == [finished["job"]], node.events()
        finally:
            node.stop(signal.SIGQUIT)
    assert seen["before"] == seen["after"], seen  # the same `sleep`, in the same cgroup
    assert ours[0][-3:] == ["022", "023", "005"], job.user_log()
    assert "Job reconnected to" in job.user_log()
    assert ours[1] == "Normal termination (return value 0)"
    assert ours[2]["result.txt"].endswith("args: sleep 25\n"), ours
    reference = running_pool.get(with_startd=True)
    theirs = reconnect_outcome(run_on_condor_startd(reference, "sleep 25", during=restart_schedd))
    assert ours == theirs, (ours, theirs)


def sleeping(node: PoolNode) -> list[int]:
    """The job's processes (its script and the script's `sleep`) in its execd job
    cgroup, as nobody."""
    pids: list[int] = harness.wait_for(
        "the job's sleep in its cgroup",
        lambda: (found := job_pids(node)) and "sleep" in map(comm, found) and found,
        WAIT_S, 0.1)  # fmt: skip
    assert all(uid_of(pid) == NOBODY for pid in pids), pids
    return sorted(pids)


def test_a_job_runs_on_through_execds_restart_in_place_unseen_by_its_shadow(
        pool: harness.Pool) -> None:  # fmt: skip
    """SIGUSR2 while a condor_submit job runs: execd re-executes itself (same pid),
    re-adopts the starter, listens on the same address, accepts the claim's session
    again and goes on with the shadow's conversation on the connection the old image
    handed over. The job is never restarted (one starter, the same processes in the
    same cgroup), condor_tail still reads its stdout and stderr, its output comes
    back, and its user log is that of an undisturbed job: no disconnect (022), no
    reconnect (023), no second start."""
    seen: dict[str, list[int]] = {}
    claim_ids: list[str] = []
    tails: list[tuple[int, str]] = []

    def restart_execd(pool: harness.Pool, job: harness.SubmittedJob) -> None:
        job.wait_for_event("001", WAIT_S)
        seen["before"] = sleeping(node)
        claim_ids.append(held_claim_id(node, "slot1_1"))
        node.send(signal.SIGUSR2)
        node.wait_for("shadow_conversation_handed_over", slot="slot1_1", connection="kept")
        node.wait_for("execd_stopped", how="restart")
        recovered = node.wait_for("recovery_done")
        assert recovered["adopted"] == 1, recovered
        joined = node.wait_for("pool_joined")
        assert joined["address"] == node.address(), (joined, node.address())
        node.wait_for("pool_claim_restored", slot="slot1_1")
        node.wait_for("shadow_conversation_resumed", connection="kept")
        seen["after"] = sleeping(node)
        for args in ([], ["-no-stdout", "-stderr"]):  # the re-adopted job's files
            done = pool.tool("condor_tail", *args, f"{job.cluster}.0", user=harness.SUBMITTER,
                             timeout_s=WAIT_S)  # fmt: skip
            tails.append((done.returncode, done.stdout))

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        pid = node.proc.pid if node.proc is not None else 0
        try:
            job = run_on_condor_startd(pool, "sleep 20", during=restart_execd)
            finished = node.wait_for("job_finished", slot="slot1_1", reason="exited")
            assert starters(node) == [finished["job"]], node.events()  # not run again
            node.wait_for("shadow_job_exited", job=finished["job"], status=0)
            assert node.proc is not None and node.proc.pid == pid and node.running()
            secret = claim_ids[0].rpartition("#")[2]
            assert len(secret) >= 32 and secret not in node.log.read_text()  # never logged
        finally:
            node.stop(signal.SIGQUIT)
    assert seen["before"] == seen["after"], seen  # the same processes, the same cgroup
    assert tails == [(0, "input one\n"), (0, "oops\n")]  # condor_tail after the restart
    events = [e for e in job.events() if e != "006"]
    assert events == ["000", "040", "040", "001", "040", "040", "005"], job.user_log()
    assert "Normal termination (return value 0)" in job.user_log()
    assert job.output("result.txt").endswith("args: sleep 20\n")
    assert job.output("out.txt") == "input one\n" and job.output("err.txt") == "oops\n"


def test_a_restart_in_place_after_a_schedd_restart_sends_the_output_to_the_new_shadow(
        pool: harness.Pool) -> None:  # fmt: skip
    """condor_restart -schedd mid-job: the new shadow reconnects (022, 023) with its own
    transfer socket and key. Then `execd restart` in place, the connection kept: the
    next image must send the output to the new shadow's transfer socket (the job ad
    still names the first shadow's, gone with its schedd). The output comes back and the
    job is not requeued: 022, 023, 005, one start. Before, the restart closed the
    reconnect's connection (its CA_RECONNECT_JOB command's task, cancelled with the
    conversation's, ended first): connection='dropped', the shadow reconnected again and
    refused the output transfer (transkey), the job was run again."""
    def restarts(pool: harness.Pool, job: harness.SubmittedJob) -> None:
        restart_schedd(pool, job)  # waits for 001 first
        job.wait_for_event("023", WAIT_S)
        node.wait_for("shadow_reconnected")  # its sessions call, if still under way, is
        node.send(signal.SIGUSR2)  # let finish by the restart's quiesce
        node.wait_for("shadow_conversation_handed_over", slot="slot1_1", connection="kept")
        node.wait_for("shadow_conversation_resumed", connection="kept")

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            job = run_on_condor_startd(pool, "sleep 45", during=restarts)
            finished = node.wait_for("job_finished", slot="slot1_1", reason="exited")
            assert starters(node) == [finished["job"]], node.events()  # not run again
        finally:
            node.stop(signal.SIGQUIT)
    events = [e for e in job.events() if e != "006"]
    assert events.count("001") == 1 and events[-3:] == ["022", "023", "005"], job.user_log()
    assert "Normal termination (return value 0)" in job.user_log()
    assert job.output("result.txt").endswith("args: sleep 45\n")
    assert job.output("out.txt") == "input one\n" and job.output("err.txt") == "oops\n"
