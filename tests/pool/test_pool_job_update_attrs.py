"""The attributes a job's starter reports (its register_job_info updates and final
update), as the user reads them in the schedd's history (`condor_history -l`) and the
admin in STARTD_HISTORY: the same jobs (one that writes and reads 4 MiB files, one that
also exits 3; each ends before its first periodic update) run on `execd run` and on the
pool's condor_startd leave records with the same attribute names but the differences
listed below (docs/pool.md says why), and the values that describe the same thing agree.

The pool's execd has no io controller (the host's cgroup v2 is controller-less), so it
leaves Block* out (unmeasured), where condor_starter publishes its statistics' zeros;
tests/vm/guest/test_block_io.py shows execd's io.stat reading on a kernel with one.
Both execute points hold nothing for memory here (condor_startd runs without cgroups).
"""

from __future__ import annotations

import json
import signal
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, pool_node, submit_files
from test_pool_startd_history import STARTD_HISTORY, records, wait_records

# Writes 4 MiB to a file in its sandbox, reads it back into another, then ends as asked.
SCRIPT = """#!/bin/sh
dd if=/dev/zero of=written.bin bs=1024 count=4096 conv=fsync 2>/dev/null
cat written.bin > copied.bin
sync
exit "$1"
"""
CASES = ("0", "3")  # the exit codes
WRITTEN_KB = 2 * 4096  # the two files

# condor_starter's statistics (StarterStatistics::Publish, in every update): Block* of
# a ProcFamily that measures none (here: no cgroup for condor_startd) are its zeros,
# left out on execd where its job's cgroup has no io controller (here: none); their
# Recent* windows, and the window's age, describe condor_starter's statistics object.
BLOCK = {"BlockReadKbytes", "BlockReads", "BlockWriteKbytes", "BlockWrites",
         "RecentBlockReadKbytes", "RecentBlockReads", "RecentBlockWriteKbytes",
         "RecentBlockWrites"}  # fmt: skip
# The shadow renames the statistics' age StatsLifetimeStarter in the job ad.
ONLY_CONDOR_SCHEDD = BLOCK | {"StatsLifetimeStarter", "RecentStatsLifetimeStarter"}
ONLY_EXECD_SCHEDD: set[str] = set()
# STARTD_HISTORY: also the empty ChirpDelayedAttrs condor_starter sends in every update.
ONLY_CONDOR_STARTD = BLOCK | {"StatsLifetime", "RecentStatsLifetime", "ChirpDelayedAttrs"}
ONLY_EXECD_STARTD: set[str] = set()
# The same on both: the job's outcome, its transfers (SpooledOutputFiles: the output
# files sent, but stdout and stderr), what it ran with.
EQUAL = ("ExitCode", "ExitBySignal", "JobStatus", "ExecuteDirWasEncrypted", "BytesSent",
         "BytesRecvd", "SpooledOutputFiles")  # fmt: skip


# Only the final update may carry the attributes: a periodic one (the pool's interval is
# 2 s, a busy host's dd and sync can take longer) would supply them without the fix.
NO_PERIODIC_UPDATE = "STARTER_UPDATE_INTERVAL = 3600\nSTARTER_INITIAL_UPDATE_INTERVAL = 3600\n"
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-update-interval.conf"


def run_jobs(pool: harness.Pool) -> list[int]:
    clusters = []
    for code in CASES:
        job = submit_files(pool, PLAIN_SUBMIT.format(args=code, extra=""), {"job.sh": SCRIPT})
        job.wait_for_event("005", WAIT_S)
        clusters.append(job.cluster)
    return clusters


def schedd_history(pool: harness.Pool, clusters: list[int]) -> list[dict[str, Any]]:
    """Each cluster's record in the schedd's history, once it is there."""
    found: dict[int, dict[str, Any]] = {}

    def read() -> bool:
        for cluster in clusters:
            if cluster not in found:
                out = pool.tool("condor_history", "-json", "-limit", "1", str(cluster))
                if out.returncode == 0 and out.stdout.strip():
                    found[cluster] = json.loads(out.stdout)[0]
        return len(found) == len(clusters)

    harness.wait_for(f"{clusters} in the schedd's history", read, WAIT_S, 0.5)
    return [found[c] for c in clusters]


def name_differences(ours: list[dict[str, Any]], theirs: list[dict[str, Any]],
                     only_condor: set[str], only_execd: set[str]) -> list[Any]:  # fmt: skip
    problems: list[Any] = []
    for code, mine, real in zip(CASES, ours, theirs, strict=True):
        if missing := set(real) - set(mine) - only_condor:
            problems.append((code, "only condor_startd's", sorted(missing)))
        if extra := set(mine) - set(real) - only_execd:
            problems.append((code, "only execd's", sorted(extra)))
    return problems


def equal_values(record: dict[str, Any]) -> list[Any]:
    """EQUAL's values; SpooledOutputFiles as a set (each execute point sends its
    listing's order: execd's sorted, condor_starter's as its directory lists them)."""
    values = [record.get(k) for k in EQUAL]
    values[EQUAL.index("SpooledOutputFiles")] = set(record.get("SpooledOutputFiles",
                                                               "-").split(","))  # fmt: skip
    return values


def check_values(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[Any]:
    problems: list[Any] = []
    for code, mine, real in zip(CASES, ours, theirs, strict=True):
        if equal_values(mine) != equal_values(real):
            problems.append((code, "values", {k: (mine.get(k), real.get(k)) for k in EQUAL}))
        for record in (mine, real):
            # the sandbox as the final update measured it: the two files and a few KiB
            # more (DiskUsage itself is the schedd's rounding of it)
            if not WRITTEN_KB <= record.get("DiskUsage_RAW", 0) <= WRITTEN_KB + 64:
                problems.append((code, "DiskUsage_RAW", record.get("DiskUsage_RAW")))
            # the job's memory, though it ended before any periodic update (KiB)
            if not 0 < record.get("ResidentSetSize", 0) < 64 * 1024:
                problems.append((code, "ResidentSetSize", record.get("ResidentSetSize")))
            if not 0 <= record.get("CpusUsage", -1) <= 2:  # cores (NUM_CPUS = 2 on execd)
                problems.append((code, "CpusUsage", record.get("CpusUsage")))
    return problems


def test_job_update_attributes_as_condor_starters(running_pool: harness.RunningPool) -> None:
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, NO_PERIODIC_UPDATE)
        try:
            ours_schedd = schedd_history(pool, run_jobs(pool))
            path = node.root / "state" / "log" / "startd_history"
            wait_records(path, len(CASES))
            kept = Path(tmp).parent / f"execd-updates-{node.root.name}"
            kept.write_text(path.read_text())
        finally:
            node.stop(signal.SIGQUIT)
    try:
        ours_startd = records(pool, kept)[0][-len(CASES):]
    finally:
        kept.unlink()
    reference = running_pool.get(with_startd=True)
    # each condor_starter reads the config as it starts: no restart needed
    config = reference.host_path(REFERENCE_CONFIG)
    config.write_text(NO_PERIODIC_UPDATE)
    try:
        theirs_schedd = schedd_history(reference, run_jobs(reference))
    finally:
        config.unlink()
    theirs_path = reference.host_path(STARTD_HISTORY)
    wait_records(theirs_path, len(CASES))
    theirs_startd = records(reference, theirs_path)[0][-len(CASES):]

    problems = name_differences(ours_schedd, theirs_schedd, ONLY_CONDOR_SCHEDD,
                                ONLY_EXECD_SCHEDD)  # fmt: skip
    problems += name_differences(ours_startd, theirs_startd, ONLY_CONDOR_STARTD,
                                 ONLY_EXECD_STARTD)  # fmt: skip
    problems += check_values(ours_schedd, theirs_schedd)
    assert not problems, "\n".join(repr(p) for p in problems)
    # the listed differences are still there (else docs/pool.md is stale)
    for ours, theirs, listed in ((ours_schedd, theirs_schedd, ONLY_CONDOR_SCHEDD),
                                 (ours_startd, theirs_startd, ONLY_CONDOR_STARTD)):
        seen = set().union(*(set(r) - set(m) for m, r in zip(ours, theirs, strict=True)))
        assert seen >= listed, sorted(listed - seen)
    # condor_starter's Block* where its ProcFamily measured nothing: its statistics' zeros
    assert {r.get("BlockWriteKbytes") for r in theirs_schedd} == {0}
