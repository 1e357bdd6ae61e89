"""STARTD_HISTORY on execd and on the pool's condor_startd: the same jobs (exit 0, exit 3,
death by signal 9, an unreadable input held 13, condor_rm of a running job, and
condor_vacate_job of one that then runs again) leave the same records, read with the
chroot's own `condor_history -file`: one per starter that ran (the vacated job two), the
same banner, ClusterId/ProcId/Owner/JobStatus/exit attributes, CompletionDate and
RemoteWallClockTime sane, and the same attribute names but those docs/pool.md lists.
A pool job that runs through `execd restart` gets exactly one record; so does a job run
on execd alone (`execd job`), which condor_history reads as well.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_jobs import pool_node, removed_while_running, vacated_and_rerun
from test_pool_reconnect import starters
from test_shadow_pool import run_on_condor_startd

from tests.component.daemon_harness import running_daemon

WAIT_S = 90
STARTD_HISTORY = "/var/lib/execd-pool/log/startd_history"
# Compared between the two records of each job (the rest by name only, or by form).
SAME = ("ProcId", "Owner", "User", "JobStatus", "ExitCode", "ExitBySignal", "ExitSignal",
        "JobState", "StarterExitStatus", "BadputCausedByDraining", "BadputCausedByPreemption",
        "Args", "JobUniverse", "RequestMemory", "JobRunCount")  # fmt: skip
# Names condor_startd's records have and execd's do not (docs/pool.md says why).
ONLY_CONDOR = {
    # condor_starter's own statistics and abilities, which execd's starter lacks
    "BlockReadKbytes", "BlockReads", "BlockWriteKbytes", "BlockWrites", "RecentBlockReadKbytes",
    "RecentBlockReads", "RecentBlockWriteKbytes", "RecentBlockWrites", "RecentStatsLifetime",
    "StatsLifetime", "ChirpDelayedAttrs",
    "StatsLifetimeStarter", "RecentStatsLifetimeStarter",
}  # fmt: skip
# ... and in the record of a job whose input transfer failed: the sandbox and its
# entries, which condor_starter's last update names and execd's conversation does not send
# (nor the rest of an update: CpusUsage, ExecuteDirWasEncrypted)
NOT_STARTED_ONLY_CONDOR = {"ScratchDirFileCount", "CondorScratchDir", "CpusUsage",
                           "ExecuteDirWasEncrypted"}  # fmt: skip
ONLY_EXECD: set[str] = set()
# ... and names condor_startd's records have only when a timer was quicker than the job:
# both starters copy CpusUsage into their updates from the slot's `.update.ad`, which
# condor_startd writes into the job's directory as it next publishes the slot after its
# starter's first update, so a run evicted soon after it began (the vacated job's first)
# may have none; execd writes the first as it starts the job, so each run that started
# has it.
TIMED_ONLY_EXECD = {"CpusUsage"}
CASES = [("exit 0", ""), ("exit 3", ""), ("signal 9", ""), ("exit 0", "in.txt")]


def run_jobs(pool: harness.Pool) -> list[int]:
    """The jobs, one after the other; their cluster ids (the vacated job's last)."""
    clusters = []
    for args, unreadable in CASES:
        job = run_on_condor_startd(pool, args, unreadable=unreadable,
                                   until="012" if unreadable else "005", wait_s=WAIT_S)
        clusters.append(job.cluster)
    clusters.append(last_cluster(pool, removed_while_running, None))
    clusters.append(last_cluster(pool, vacated_and_rerun, None))
    return clusters


def last_cluster(pool: harness.Pool, run: Callable[[harness.Pool, Any], Any], node: Any) -> int:
    run(pool, node)
    out = pool.tool("condor_q", "-allusers", "-af", "ClusterId").stdout.split()
    history = pool.tool("condor_history", "-af", "ClusterId", "-limit", "1").stdout.split()
    return max(int(c) for c in [*out, *history])


def records(pool: harness.Pool, host_file: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The file's records as `condor_history -file` reads them (oldest first), and its
    banner lines."""
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="execd-hist-",
                                     delete=False) as copy:  # /tmp: the chroot's too
        copy.write(host_file.read_text())
    try:
        out = pool.tool("condor_history", "-forwards", "-file", copy.name, "-json").check()
        # the form admins use (-startd: the startd's history) reads the same records
        startd = pool.tool("condor_history", "-startd", "-forwards", "-file", copy.name,
                           "-af", "GlobalJobId").check()  # fmt: skip
    finally:
        Path(copy.name).unlink()
    banners = [line for line in host_file.read_text().splitlines() if line.startswith("***")]
    ads = json.loads(out.stdout) if out.stdout.strip() else []
    assert startd.stdout.split() == [ad["GlobalJobId"] for ad in ads], startd.stdout
    assert not [ad for ad in ads if {"ClaimId", "Capability", "TransferKey"} & set(ad)]
    return ads, banners


def wait_records(path: Path, count: int) -> None:
    harness.wait_for(f"{count} records in {path}", lambda: path.exists() and sum(
        line.startswith("*** ") for line in path.read_text().splitlines()) >= count,
        WAIT_S, 0.2)  # fmt: skip


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """SAME's values; the vacated job's Args (its mark, `<pid>-<the pool's submissions
    so far>`) as a form: each mode's pool counts its own submissions, which earlier
    test files shift apart."""
    values = {k: record.get(k) for k in SAME}
    if isinstance(values["Args"], str):
        values["Args"] = re.sub(r"^\d+-\d+$", "<pid>-<n>", values["Args"])
    return values


def banner_form(banner: str) -> str:
    return re.sub(r"(Offset|ClusterId|CompletionDate|CurrentTime) = -?\d+", r"\1 = N", banner)


def check_offsets(text: str) -> None:
    """Each banner's Offset is where the previous banner starts (0 for the first)."""
    previous = 0
    position = 0
    for line in text.splitlines(keepends=True):
        if line.startswith("*** "):
            assert f"Offset = {previous} " in line, (previous, line)
            previous = position
        position += len(line.encode())


def test_startd_history_as_condor_startds(running_pool: harness.RunningPool) -> None:
    pool = running_pool.get(with_startd=False)
    began = int(time.time())
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            ours_clusters = run_jobs(pool)
            path = node.root / "state" / "log" / "startd_history"
            wait_records(path, 7)
            kept = Path(tmp).parent / f"execd-hist-{node.root.name}"
            shutil.copy(path, kept)
        finally:
            node.stop(signal.SIGQUIT)
    try:
        ours, our_banners = records(pool, kept)
        text = kept.read_text()
    finally:
        kept.unlink()
    check_offsets(text)
    reference = running_pool.get(with_startd=True)
    theirs_clusters = run_jobs(reference)
    theirs_path = reference.host_path(STARTD_HISTORY)
    wait_records(theirs_path, 7)
    theirs, their_banners = records(reference, theirs_path)
    ended = int(time.time())

    assert len(ours) == len(theirs) == 7, (ours, theirs)
    # one record per run, in the same order; the vacated job's two runs last
    assert [r["ClusterId"] - ours_clusters[0] for r in ours] == \
        [r["ClusterId"] - theirs_clusters[0] for r in theirs]  # fmt: skip
    assert [banner_form(b) for b in our_banners] == [banner_form(b) for b in their_banners]
    problems = []
    for n, (mine, real) in enumerate(zip(ours, theirs, strict=True)):
        same = comparable(mine), comparable(real)
        if same[0] != same[1]:
            problems.append((n, "values", same))
        if not began <= mine["CompletionDate"] <= ended or \
                not 0 <= mine["RemoteWallClockTime"] <= mine["CompletionDate"] - began:
            problems.append((n, "times", mine["CompletionDate"], mine["RemoteWallClockTime"]))
        names, real_names = set(mine), set(real)
        allowed = ONLY_CONDOR | (NOT_STARTED_ONLY_CONDOR if "JobState" not in real else set())
        if real_names - names - allowed:
            problems.append((n, "missing", sorted(real_names - names - allowed)))
        if extra := names - real_names - ONLY_EXECD - TIMED_ONLY_EXECD:
            problems.append((n, "extra", sorted(extra)))
    assert not problems, "\n".join(repr(p) for p in problems)
    # the differences docs/pool.md lists are still there
    listed = ONLY_CONDOR | NOT_STARTED_ONLY_CONDOR
    missing = set().union(*(set(real) - set(mine)
                            for mine, real in zip(ours, theirs, strict=True)))  # fmt: skip
    assert missing >= listed, sorted(listed - missing)


def test_a_pool_job_through_execd_restart_gets_exactly_one_record(pool: harness.Pool) -> None:
    def restart_execd(pool: harness.Pool, job: harness.SubmittedJob) -> None:
        job.wait_for_event("001", WAIT_S)
        node.send(signal.SIGUSR2)
        assert node.wait_for("recovery_done", timeout=WAIT_S)["adopted"] == 1
        node.wait_for("shadow_conversation_resumed", timeout=WAIT_S)

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            job = run_on_condor_startd(pool, "sleep 6", during=restart_execd, wait_s=WAIT_S)
            finished = node.wait_for("job_finished", slot="slot1_1", reason="exited")
            assert starters(node) == [finished["job"]]  # it ran once
            path = node.root / "state" / "log" / "startd_history"
            wait_records(path, 1)
            node.send(signal.SIGUSR2)  # a restart with the outcome recorded adds none
            node.wait_for("recovery_done", timeout=WAIT_S)
            (record,), banners = records(pool, path)
        finally:
            node.stop(signal.SIGQUIT)
    assert len(banners) == 1
    assert (record["ClusterId"], record["ProcId"], record["Owner"]) == \
        (job.cluster, 0, harness.SUBMITTER)  # fmt: skip
    assert (record["JobStatus"], record["ExitCode"], record["JobState"]) == (4, 0, "Exited")
    assert record["BytesSent"] > 0 and record["BytesRecvd"] > 0  # the final update's
    assert record["RemoteWallClockTime"] >= 6


def test_a_job_run_on_execd_alone_is_read_by_condor_history(pool: harness.Pool) -> None:
    with running_daemon("NUM_CPUS = 1\nMEMORY = 512\n", prefix="execd-hist-") as node:
        done = node.execd("job", "--attr", "ClusterId=12", "--attr", "ProcId=3", "--",
                          "sh", "-c", "exit 5", timeout=60)  # fmt: skip
        assert done.returncode == 5, done.stderr
        finished = node.wait_for("job_finished")
        (record,), (banner,) = records(pool, node.root / "state" / "log" / "startd_history")
    assert (record["ClusterId"], record["ProcId"], record["Owner"]) == (12, 3, "root")
    assert (record["ExitCode"], record["JobStatus"]) == (5, 4)
    assert record["GlobalJobId"] == finished["job"]
    assert banner.startswith('*** Offset = 0 ClusterId = 12 ProcId = 3 Owner = "root" ')
