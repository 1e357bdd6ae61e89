"""The daemon-level attributes of every slot ad (execd/daemon/pool_daemon_attrs.py):
with two jobs running, `execd run` publishes on its partitionable and dynamic slots the
same set of them as the pool's own condor_startd (its counters, self monitor, starter
abilities, hibernation, execute volume, collector sequence), and equal counter values;
the collector sequences execd's updates (UpdatesSequenced grows, none lost).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pool_harness as harness
from test_pool_daemon import WAIT_S, administrators
from test_pool_jobs import PLAIN_SUBMIT, SLEEP_SCRIPT, on_both, submit_files

from execd.wire.sinful import v1_address

COUNTERS = (
    "JobStarts", "ClaimRequests", "ActivationRequests", "JobPreemptions",
    "JobRankPreemptions", "JobUserPrioPreemptions", "NewDSlotNotMatch",
)  # fmt: skip
EVERY_SLOT = (
    *COUNTERS, *(f"Recent{name}" for name in COUNTERS), "TotalSlots",
    "DaemonStartTime", "DaemonLastReconfigTime", "UpdateSequenceNumber", "IsLocalStartd",
    "StarterAbilityList", "HasReconnect", "HasTransferInputRemaps", "HasFileTransfer",
    "HasJobNetworking", "HasSshd", "HasVM", "CanHibernate", "HibernationLevel",
    "HibernationState", "HibernationSupportedStates", "IsWakeAble", "IsWakeOnLanEnabled",
    "IsWakeOnLanSupported", "WakeOnLanEnabledFlags", "WakeOnLanSupportedFlags", "Unhibernate",
    "MonitorSelfAge", "MonitorSelfCPUUsage", "MonitorSelfImageSize",
    "MonitorSelfRegisteredSocketCount", "MonitorSelfResidentSetSize",
    "MonitorSelfSecuritySessions", "MonitorSelfTime", "DaemonCoreDutyCycle",
    "RecentDaemonCoreDutyCycle", "DetectedDisk", "ExecuteVolume", "HardwareAddress",
    "SubnetMask", "TimeToLive", "AddressV1", "CondorPlatform", "COLLECTOR_HOST_STRING",
    "HasRotationalScratch", "AcceptedWhileDraining", "LastFetchWorkSpawned",
    "LastFetchWorkCompleted", "NextFetchWorkDelay",
)  # fmt: skip
# The same on both execute points (one host, no fetch hooks, no drain).
SAME_VALUE = ("HasRotationalScratch", "AcceptedWhileDraining",
              "LastFetchWorkSpawned", "LastFetchWorkCompleted", "NextFetchWorkDelay")
PSLOT_ONLY = ("NumDynamicSlotsTime",)
# What the collector keeps about each ad's updates (collector_stats.cpp).
SEQUENCE = ("UpdateSequenceNumber", "UpdatesSequenced", "UpdatesLost", "UpdatesTotal")


def startd_counters(pool: harness.Pool, **at_least: int) -> dict[str, int]:
    """The startd counters slot1's ad publishes once each of `at_least` has reached
    its value there (an update after the events)."""

    def published() -> dict[str, int] | None:
        ad = next((ad for ad in pool.status("-slots")
                   if str(ad.get("Name", "")).startswith("slot1@")), {})  # fmt: skip
        if all(ad.get(name, -1) >= value for name, value in at_least.items()):
            return {n: ad[n] for n in (*COUNTERS, *(f"Recent{n}" for n in COUNTERS))}
        return None

    counters: dict[str, int] = harness.wait_for(f"slot1's counters at {at_least}",
                                                published, WAIT_S, 0.5)  # fmt: skip
    return counters


def two_jobs_running(pool: harness.Pool) -> dict[str, Any]:
    """Two sleep jobs of one cluster run in two dynamic slots: which of the daemon
    attributes each kind of slot publishes, the counters' values, and the collector's
    account of the updates."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra="").replace(
        "queue", "queue 2"), {"job.sh": SLEEP_SCRIPT})  # fmt: skip
    try:
        harness.wait_for("both jobs' execute events",
                         lambda: job.events().count("001") == 2, WAIT_S)  # fmt: skip

        def counted() -> list[dict[str, Any]] | None:
            ads = pool.status("-slots")
            started = [ad.get("JobStarts") for ad in ads]
            sequenced = all(ad.get("UpdatesSequenced", 0) > 0 for ad in ads)
            return ads if len(ads) == 3 and started == [2, 2, 2] and sequenced else None

        ads: list[dict[str, Any]] = harness.wait_for(
            "JobStarts = 2 on every slot, in an update after the slot's first", counted,
            WAIT_S, 0.5)  # fmt: skip
        pslot = next(ad for ad in ads if ad.get("SlotType") == "Partitionable")
        dslots = [ad for ad in ads if ad.get("SlotType") == "Dynamic"]
        names = EVERY_SLOT + PSLOT_ONLY
        return {
            "partitionable": sorted(n for n in names if n in pslot),
            "dynamic": sorted({n for ad in dslots for n in names if n in ad}),
            "counters": {ad["Name"].split("@")[0]: {n: ad[n] for n in
                         (*COUNTERS, *(f"Recent{n}" for n in COUNTERS), "TotalSlots")}
                         for ad in ads},
            "same on every slot": all(ad[n] == pslot[n] for ad in dslots for n in COUNTERS),
            "sequence": {ad["Name"].split("@")[0]: {n: ad.get(n) for n in SEQUENCE}
                         for ad in ads},
            "abilities": {n: pslot.get(n) for n in ("HasReconnect", "HasFileTransfer",
                                                    "HasTransferInputRemaps", "HasVM")},
            "hibernation": {n: pslot.get(n) for n in ("CanHibernate", "HibernationState",
                                                      "HibernationLevel", "TimeToLive")},
            "same": [{n: ad.get(n) for n in SAME_VALUE if n != "COLLECTOR_HOST_STRING"}
                     for ad in ads],
            # SYSTEM_STARTD_ATTRS: the pool's COLLECTOR_HOST (each run has its own port)
            "collector": {ad.get("COLLECTOR_HOST_STRING") == pool.collector
                          for ad in ads},
            # AddressV1 is MyAddress in HTCondor's v1 form, on every slot
            "v1": all(ad["AddressV1"] == v1_address(ad["MyAddress"]) for ad in ads),
            "platform": {ad["CondorPlatform"] for ad in ads},
        }
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_daemon_attributes_match_condor_startds_with_two_jobs_running(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, two_jobs_running)
    assert ours["partitionable"] == theirs["partitionable"] == sorted(EVERY_SLOT + PSLOT_ONLY)
    assert ours["dynamic"] == theirs["dynamic"] == sorted(EVERY_SLOT)
    assert ours["counters"] == theirs["counters"]
    assert ours["counters"]["slot1"] == {
        "JobStarts": 2, "RecentJobStarts": 2, "ClaimRequests": 2, "RecentClaimRequests": 2,
        "ActivationRequests": 2, "RecentActivationRequests": 2, "JobPreemptions": 0,
        "RecentJobPreemptions": 0, "JobRankPreemptions": 0, "RecentJobRankPreemptions": 0,
        "JobUserPrioPreemptions": 0, "RecentJobUserPrioPreemptions": 0,
        "NewDSlotNotMatch": 0, "RecentNewDSlotNotMatch": 0, "TotalSlots": 3,
    }  # fmt: skip
    assert ours["same on every slot"] and theirs["same on every slot"]
    assert ours["abilities"] == theirs["abilities"]
    assert ours["hibernation"] == theirs["hibernation"]
    assert ours["same"] == theirs["same"]
    assert ours["collector"] == theirs["collector"] == {True}
    assert ours["same"][0] == {
        "HasRotationalScratch": theirs["same"][0]["HasRotationalScratch"],
        "AcceptedWhileDraining": False, "LastFetchWorkSpawned": 0, "LastFetchWorkCompleted": 0,
        "NextFetchWorkDelay": -1}  # fmt: skip
    assert ours["v1"] and theirs["v1"]
    for platform in (*ours["platform"], *theirs["platform"]):  # one each: the EP's
        assert re.fullmatch(r"\$CondorPlatform: X86_64-\w+_\d* \$", platform), platform
    assert len(ours["platform"]) == len(theirs["platform"]) == 1
    for name, sequence in [*ours["sequence"].items(), *theirs["sequence"].items()]:
        # the collector sequenced the updates after an ad's first; none went missing
        assert sequence["UpdateSequenceNumber"] >= 2, (name, sequence)
        assert sequence["UpdatesSequenced"] > 0, (name, sequence)
        assert sequence["UpdatesLost"] == 0, (name, sequence)


def reconfigured(pool: harness.Pool) -> tuple[bool, ...]:
    """condor_reconfig of the execute point: what slot1's ad says of its start and its
    last reconfig before and after, and whether the collector lost an update."""

    def slot1() -> dict[str, Any] | None:
        return next((ad for ad in pool.status("-slots")
                     if str(ad.get("Name", "")).startswith("slot1@")), None)  # fmt: skip

    before: dict[str, Any] = harness.wait_for("slot1's ad", slot1, WAIT_S, 0.2)
    started = before["DaemonStartTime"]
    # the attributes count whole seconds: the reconfig must come in a later one
    harness.wait_for("a second after the start", lambda: time.time() >= started + 2, WAIT_S)
    pool.tool("condor_reconfig", "-addr", before["MyAddress"]).check()

    def reconfig_published() -> dict[str, Any] | None:
        ad = slot1()
        return ad if ad is not None and ad["DaemonLastReconfigTime"] > started else None

    after: dict[str, Any] = harness.wait_for("DaemonLastReconfigTime moved", reconfig_published,
                                             WAIT_S, 0.2)  # fmt: skip
    return (before["DaemonLastReconfigTime"] == started, after["DaemonStartTime"] == started,
            after["DaemonLastReconfigTime"] <= time.time(), after["UpdatesLost"] == 0,
            after["UpdateSequenceNumber"] > before["UpdateSequenceNumber"])  # fmt: skip


def test_a_reconfig_moves_daemon_last_reconfig_time_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    admins = administrators(running_pool.get(with_startd=False))  # condor_reconfig's
    ours, theirs = on_both(running_pool, reconfigured, admins)
    assert ours == theirs == (True, True, True, True, True)


# A partitionable slot willing to be matched whose dynamic slots are not: each claim's
# new d-slot refuses the job (condor_startd's "Request to create dslot resource refused").
UNWILLING_DSLOTS = "START = PartitionableSlot =?= true\n"


def dslot_refused(pool: harness.Pool) -> dict[str, Any]:
    """A job matched to the p-slot whose d-slot's START refuses it: the counters once
    NewDSlotNotMatch counted it, and the job still idle."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SLEEP_SCRIPT})
    try:
        counters = startd_counters(pool, NewDSlotNotMatch=1, ClaimRequests=1)
        status = pool.queue(str(job.cluster))[0]["JobStatus"]
        return {"counted": counters["NewDSlotNotMatch"] >= 1
                and counters["RecentNewDSlotNotMatch"] == counters["NewDSlotNotMatch"]
                and counters["ClaimRequests"] >= counters["NewDSlotNotMatch"],
                "started": counters["JobStarts"], "idle": status == 1}  # fmt: skip
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_dslot_that_refuses_its_job_is_counted_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    # test_pool_preemption imports this module's startd_counters
    from test_pool_preemption import reference_config

    ours, theirs = on_both(running_pool, dslot_refused, UNWILLING_DSLOTS,
                           lambda pool: reference_config(
                               pool, "99-execd-unwilling-dslots.conf", UNWILLING_DSLOTS,
                               lambda ad: "PartitionableSlot" in str(ad.get("Start"))))
    assert ours == theirs == {"counted": True, "started": 0, "idle": True}
