"""The pool's tools see execd's node as they see a condor_startd 25 node beyond its slot
ads: a daemon ad of MyType StartD named after the node (condor_status -startd and its
totals), HasStartDaemonAd in every slot ad,
and an address whose alias= is the node's name. Compared with the pool's own
condor_startd under the same MEMORY, with one job running.
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import start_node
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, SLEEP_SCRIPT, on_both, submit_files
from test_pool_preemption import reference_config

from execd.wire.sinful import parse_sinful, v1_address

SAME_CONFIG = "MEMORY = 1024\n"
STARTD_TYPES = ("Machine", "StartD")
# What condor_status -startd prints and totals, and what locating a startd reads.
TOOL_ATTRS = ("MyType", "Name", "Machine", "DetectedCpus", "DetectedMemory", "TotalSlots",
              "TotalCpus", "TotalMemory", "TotalInUseCpus", "TotalInUseMemory",
              "TotalBackfillInUseCpus", "TotalBackfillInUseMemory", "TotalBackfillInUseDisk",
              "ExcessBackfillCpus", "ExcessBackfillMemory", "ExcessBackfillDisk",
              "ExcessBackfillGPUs", "Arch", "OpSys", "IsLocalStartd")  # fmt: skip
# In condor_startd's daemon ad, not in execd's: the starter abilities execd's starter
# lacks (left out of its slot ads alike; MappingMethod is common files transfer's), and
# HasFileTransferPluginMethods: execd has no plugins here (none in the host's LIBEXEC).
NOT_IN_EXECDS = {
    "HasCommonFilesTransfer", "HasFileTransferPluginMethods", "HasIOProxy",
    "HasJICLocalConfig", "HasJICLocalStdin", "HasJobDeferral",
    "HasOsUser", "HasPerFileEncryption", "HasSelfCheckpointTransfers", "HasTDP",
    "MappingMethod",
}  # fmt: skip
# In execd's, not in condor_startd's: machine facts execd's slot ads carry too (the
# host's OS version: the chroot's sid has none; its cores).
ONLY_IN_EXECDS = {"DetectedCores", "OpSysVer", "OpSysMajorVer"}


def startd_view(pool: harness.Pool) -> dict[str, Any]:
    """With one 1-CPU job running: the startd ads the collector lists, the daemon ad,
    and condor_status -startd's totals."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra="request_cpus = 1"),
                       {"job.sh": SLEEP_SCRIPT})  # fmt: skip
    try:
        job.wait_for_event("001", WAIT_S)
        (daemon,) = harness.wait_for(
            "the daemon ad counting the job",
            lambda: [ad for ad in pool.status("-startd") if ad.get("TotalInUseCpus") == 1.0],
            WAIT_S, 0.5)  # fmt: skip
        slots = pool.status("-slots")
        totals = pool.tool("condor_status", "-startd", "-totals").check().stdout
        # Name Platform Version Cpus Memory GPUs Uptime: one row per node
        rows = pool.tool("condor_status", "-startd").check().stdout.split("\n\n")[1]
        return {
            "types": sorted(t for (t,) in pool.status_af("MyType") if t in STARTD_TYPES),
            "daemon": daemon,
            "slots": slots,
            "total": [line.split() for line in totals.splitlines() if "Total" in line],
            "rows": [line.split() for line in rows.splitlines()],
        }
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_execd_sends_a_startd_daemon_ad_as_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, startd_view, SAME_CONFIG, lambda pool: reference_config(
        pool, "99-execd-daemon-ad.conf", SAME_CONFIG, lambda ad: ad.get("TotalMemory") == 1024))
    for view in (ours, theirs):
        # a p-slot and the job's d-slot, and one daemon ad named after the node
        assert view["types"] == ["Machine", "Machine", "StartD"]
        assert view["daemon"]["Name"] == view["daemon"]["Machine"] == view["slots"][0]["Machine"]
        assert all(slot["HasStartDaemonAd"] is True for slot in view["slots"])
    assert {k: ours["daemon"].get(k) for k in TOOL_ATTRS} == \
        {k: theirs["daemon"].get(k) for k in TOOL_ATTRS}
    assert ours["daemon"]["TotalInUseCpus"] == 1.0 and ours["daemon"]["TotalMemory"] == 1024
    # Machines Slots Cpus BusyCpus BkCpus GPUs BusyGPUs BkGPUs Memory% BkMem%
    assert ours["total"] == theirs["total"] == [
        ["Total", "1", "2", "2", "1", "0", "0", "0", "0", "12.50%", "0.00%"]]
    # the node's row: its name, Cpus and Memory alike (Platform and Version say the OS
    # of the host and of the pool's chroot, and execd's version; Uptime differs)
    assert [[r[0], *r[3:6]] for r in ours["rows"]] == [[r[0], *r[3:6]] for r in theirs["rows"]]
    assert [r[0] for r in ours["rows"]] == [ours["daemon"]["Machine"]]
    ours_names, theirs_names = set(ours["daemon"]), set(theirs["daemon"])
    assert theirs_names - ours_names == NOT_IN_EXECDS
    assert ours_names - theirs_names <= ONLY_IN_EXECDS
    # the address: alias= the node's name, in the daemon ad and every slot ad, and
    # AddressV1 the same address in HTCondor's v1 form
    for view in (ours, theirs):
        for ad in (view["daemon"], *view["slots"]):
            assert parse_sinful(ad["MyAddress"]).params["alias"] == ad["Machine"]
            assert ad["AddressV1"] == v1_address(ad["MyAddress"])


TRANSFER_SCRIPT = "#!/bin/sh\nhead -c 200000 in.txt > out.bin\necho done\n"
TRANSFER_STATS = ("AvgTransferInputMB", "TotalTransferInputMB", "AvgTransferOutputMB",
                  "TotalTransferOutputMB")  # fmt: skip


def transfer_view(pool: harness.Pool) -> dict[str, float]:
    """Two jobs, each with a 300000-byte input file and a 200000-byte output: the daemon
    ad's transfer statistics once it has counted both."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra="transfer_input_files = in.txt")
                       .replace("queue", "queue 2"),
                       {"job.sh": TRANSFER_SCRIPT, "in.txt": "x" * 300000})  # fmt: skip
    harness.wait_for("both jobs' ends", lambda: job.events().count("005") == 2, WAIT_S)
    (daemon,) = harness.wait_for(
        "the daemon ad counting both jobs' transfers",
        lambda: [ad for ad in pool.status("-startd")
                 if ad.get("TotalTransferInputMB", 0) >= 2 * 300000 / 2**20], WAIT_S, 0.5)
    return {name: daemon[name] for name in TRANSFER_STATS}


def test_the_daemon_ad_counts_the_jobs_transfers_as_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, transfer_view)
    assert ours == theirs
    # the input: job.sh and in.txt of each job; the output: out.bin, out.txt, err.txt
    per_job_in = (300000 + len(TRANSFER_SCRIPT)) / 2**20
    per_job_out = (200000 + len("done\n")) / 2**20
    assert ours == pytest.approx({"AvgTransferInputMB": per_job_in,
                                  "TotalTransferInputMB": 2 * per_job_in,
                                  "AvgTransferOutputMB": per_job_out,
                                  "TotalTransferOutputMB": 2 * per_job_out})  # fmt: skip


def test_the_daemon_ad_goes_when_execd_stops_and_stays_away_when_disabled(
        pool: harness.Pool) -> None:  # fmt: skip
    def daemon_ads() -> list[str]:
        return [name for (name,) in pool.status_af("Name", what="-startd")]

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        (machine,) = {ad["Machine"] for ad in pool.status("-slots")}
        assert harness.wait_for("the daemon ad", daemon_ads, WAIT_S, 0.2) == [machine]
        node.stop(signal.SIGTERM)
        harness.wait_for("the daemon ad gone", lambda: not daemon_ads(), 10, 0.2)
    # ENABLE_STARTD_DAEMON_AD = false: slot ads without HasStartDaemonAd, from which the
    # collector makes up a daemon ad of slot 1's (as for a condor_startd so configured)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "ENABLE_STARTD_DAEMON_AD = false\n")
        (slot,) = harness.wait_for("the slot ad", lambda: pool.status("-slots"), WAIT_S, 0.2)
        assert "HasStartDaemonAd" not in slot
        assert daemon_ads() == [slot["Name"]]
        node.stop(signal.SIGTERM)


def test_a_reload_that_turns_the_daemon_ad_off_takes_it_out_of_the_collector(
        pool: harness.Pool) -> None:  # fmt: skip
    def daemon_ads() -> list[str]:
        return sorted(name for (name,) in pool.status_af("Name", what="-startd"))

    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        (machine,) = {ad["Machine"] for ad in pool.status("-slots")}
        assert harness.wait_for("the daemon ad", daemon_ads, WAIT_S, 0.2) == [machine]
        with node.config.open("a") as config:
            config.write("ENABLE_STARTD_DAEMON_AD = false\n")
        node.send(signal.SIGHUP)
        node.wait_for("reconfig_applied")
        # gone at once (not left stale until shutdown); the collector makes up one of
        # slot 1's from the slot ad now without HasStartDaemonAd, as for a startd so
        # configured from the start
        made_up = [f"slot1@{machine}"]
        assert harness.wait_for("only the made-up daemon ad", lambda: daemon_ads() == made_up,
                                WAIT_S, 0.2)  # fmt: skip
        node.wait_for("startd_daemon_ad_invalidated", name=machine)
        assert "HasStartDaemonAd" not in pool.status("-slots")[0]
        node.stop(signal.SIGTERM)
        harness.wait_for("no daemon ad after the stop", lambda: not daemon_ads(), 10, 0.2)
