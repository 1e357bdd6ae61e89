"""The slot ad the starter hands the shadow (register_starter_info's nested SlotAd), as
the shadow itself shows it: with `SHADOW_DEBUG = D_MACHINE` the shadow logs every
starter's "StarterInfo ad", SlotAd included. A job on `execd run` shows the claimed
d-slot's public ad there, as a job on the pool's own condor_startd does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both

from execd.wire.classad_codec import to_classad

SHADOW_DEBUG = "/etc/condor/config.d/95-execd-shadow-debug.conf"
JOB = """\
executable = /bin/true
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_cpus = 1
request_memory = 64
queue
"""
# What says which slot the job got and how to reach and match it: in condor_startd's
# SlotAd (and execd's) for a job in a dynamic slot.
SLOT_IDENTITY = ("Name", "MyType", "TargetType", "SlotType", "SlotID", "DSlotId", "Cpus",
                 "Memory", "Disk", "Machine", "MyAddress", "StartdIpAddr", "Requirements",
                 "Start", "Arch", "OpSys", "DynamicSlot", "State", "Activity", "RemoteUser",
                 "RemoteOwner", "PublicClaimId", "JobUniverse")  # fmt: skip


@contextlib.contextmanager
def shadow_logs_starter_info(pool: harness.Pool) -> Iterator[None]:
    """Shadows started meanwhile log the starter's ad (each shadow reads the config)."""
    path = pool.host_path(SHADOW_DEBUG)
    path.write_text("SHADOW_DEBUG = D_MACHINE\n")
    try:
        yield
    finally:
        path.unlink()


def logged_starter_info(pool: harness.Pool, cluster: int) -> dict[str, str]:
    """The StarterInfo ad the shadow of job `cluster`.0 logged: name -> expression."""
    lines = pool.daemon_log("ShadowLog").splitlines()
    for i, line in enumerate(lines):
        if "StarterInfo ad:" in line and f"({cluster}.0)" in line:
            ad = {}
            for attr in lines[i + 1 :]:
                if not attr.startswith("\t"):
                    break
                name, _, expr = attr.strip().partition(" = ")
                ad[name] = expr
            return ad
    raise AssertionError(f"no StarterInfo ad of job {cluster}.0 in the ShadowLog")


def slot_ad_of_a_job(pool: harness.Pool) -> dict[str, Any]:
    with shadow_logs_starter_info(pool):
        job = pool.submit(JOB)
        job.wait_for_event("005", WAIT_S)
    logged = logged_starter_info(pool, job.cluster)
    assert "SlotAd" in logged, sorted(logged)
    info = to_classad(logged)
    slot = info["SlotAd"]
    (done,) = pool.history(job.cluster)
    return {
        "names the slot the job ran in": slot["Name"] == info["Name"] == done["LastRemoteHost"],
        "missing": [name for name in SLOT_IDENTITY if name not in slot],
        "type": (slot["MyType"], slot["TargetType"], slot["SlotType"], slot["DynamicSlot"]),
        "claimed by": (slot["State"], slot["Activity"], slot["RemoteUser"] == done["User"]),
        "resources": (slot["Cpus"], slot["Memory"]),
        "job": slot["JobUniverse"],
        "no secret": not any(name.lower() in ("claimid", "capability") for name in slot),
    }


def test_the_shadow_gets_the_slot_ad_as_from_condor_startds_starter(
    running_pool: harness.RunningPool,
) -> None:
    ours, theirs = on_both(running_pool, slot_ad_of_a_job)
    assert ours == theirs
    assert ours["names the slot the job ran in"] and ours["no secret"]
    assert ours["missing"] == []
    assert ours["type"] == ("Machine", "Job", "Dynamic", True)
    assert ours["claimed by"] == ("Claimed", "Idle", True)  # as the starter started
    assert ours["resources"] == (1, 128)  # request_memory 64, rounded up to 128
    assert ours["job"] == 5
