"""The harness gives a real HTCondor pool: the base the execd-in-pool tests build on.

Without an execute point a job must stay Idle; with HTCondor's own startd (the
reference EP) a job runs to completion. The reference tests come last: switching mode
restarts the pool.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
import tiers

IDLE = 1  # JobStatus
ECHO_JOB = """\
executable = /bin/echo
arguments = hi
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
queue
"""
# Seconds: negotiation runs every harness.INTERVAL_S; a start is a few cycles.
RUN_TIMEOUT_S = 90


def test_collector_lists_schedd_and_negotiator(pool: harness.Pool) -> None:
    schedds = pool.status("-schedd")
    negotiators = pool.status("-negotiator")
    assert [ad["MyType"] for ad in schedds] == ["Scheduler"]
    assert [ad["MyType"] for ad in negotiators] == ["Negotiator"]
    assert pool.collector in pool.tool("condor_config_val", "COLLECTOR_HOST").check().stdout


def test_pool_has_no_execute_point(pool: harness.Pool) -> None:
    assert pool.status("-startd") == []  # no StartD daemon ad
    assert pool.status("-slots") == []  # and no slot ads


def test_daemons_listen_only_on_the_tiers_loopback_port(pool: harness.Pool) -> None:
    (address,) = pool.status_af("MyAddress", what="-schedd")[0]
    assert address.startswith(f"<127.0.0.1:{pool.port}?")
    assert "sock=" in address  # behind the shared port daemon
    listening = pool.listening_addresses()
    assert f"127.0.0.1:{pool.port}" in listening
    assert all(a.startswith("127.0.0.1:") for a in listening), listening


def test_job_without_execute_point_stays_idle(pool: harness.Pool) -> None:
    job = pool.submit(ECHO_JOB)
    ad = job.ad()
    assert ad is not None and ad["Owner"] == harness.SUBMITTER
    # The schedd tells the collector it has an idle job; the next negotiation cycle
    # sees that submitter ad and, with no execute point, matches nothing.
    harness.wait_for(
        "the submitter ad with the idle job",
        lambda: any(int(s.get("IdleJobs", 0)) >= 1 for s in pool.status("-submitters")),
        RUN_TIMEOUT_S,
    )
    visible_since = int(time.time()) + 1
    negotiator = harness.wait_for(
        "a negotiation cycle after the submitter ad arrived",
        lambda: _negotiator_cycle_since(pool, visible_since),
        RUN_TIMEOUT_S,
    )
    assert negotiator["LastNegotiationCycleMatches0"] == 0
    ad = job.ad()
    assert ad is not None and ad["JobStatus"] == IDLE
    assert job.events() == ["000"]  # submitted, nothing else
    pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()


def _negotiator_cycle_since(pool: harness.Pool, since: int) -> dict[str, Any] | None:
    (negotiator,) = pool.status("-negotiator")
    started = int(negotiator.get("LastNegotiationCycleTime0", 0))
    return negotiator if started >= since else None


HOST_ADVERTISE = """\
import sys
import classad2
import htcondor2
what, name = sys.argv[1], sys.argv[2]
if what == "UPDATE_STARTD_AD":
    ad = {"MyType": "Machine", "Name": name, "Machine": "host", "Requirements": True,
          "MyAddress": "<127.0.0.1:1>", "StartdIpAddr": "<127.0.0.1:1>", "Cpus": 1}
else:
    ad = {"MyType": "Query", "TargetType": "Machine", "Requirements": f'Name == "{name}"'}
    ad["Requirements"] = classad2.ExprTree(ad["Requirements"])
htcondor2.Collector().advertise([classad2.ClassAd(ad)], what)
"""


def test_host_client_authenticates_with_fs(pool: harness.Pool, tmp_path: Path) -> None:
    """A client on the host (where execd runs) passes FS authentication as root and
    may advertise a slot ad: the path execd's pool mode takes to the collector."""
    env = {"CONDOR_CONFIG": str(pool.host_client_config(tmp_path)), "PATH": "/usr/bin:/bin"}
    name = f"host-probe-{pool.port}@host"

    def advertise(command: str) -> None:
        subprocess.run([sys.executable, "-c", HOST_ADVERTISE, command, name],
                       env=env, check=True, timeout=60)  # fmt: skip

    def names() -> list[str]:
        return [row[0] for row in pool.status_af("Name", what="-slots")]

    advertise("UPDATE_STARTD_AD")
    try:
        harness.wait_for(f"{name} in the collector", lambda: name in names(), 30)
    finally:
        advertise("INVALIDATE_STARTD_ADS")
    harness.wait_for(f"{name} gone from the collector", lambda: name not in names(), 30)


class _BadConfigPool(harness.Pool):
    def config_text(self) -> str:
        return super().config_text() + "this line is not HTCondor configuration\n"


def test_failed_start_leaves_no_mounts_or_processes(running_pool: harness.RunningPool) -> None:
    running_pool.close()  # one pool per chroot: make room
    broken = _BadConfigPool()
    with pytest.raises(harness.PoolError, match="condor_master exited"):
        broken.start()
    assert tiers.mounts_under(broken.root) == []
    assert broken.chroot_pids() == []


def test_stop_leaves_no_mounts_or_processes(running_pool: harness.RunningPool) -> None:
    pool = running_pool.get(with_startd=False)
    pids = pool.chroot_pids()
    assert pids, "a running pool has processes in the chroot"
    assert tiers.mounts_under(pool.root) != []
    running_pool.close()
    assert tiers.mounts_under(pool.root) == []
    assert pool.chroot_pids() == []
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def test_a_test_config_a_killed_run_left_is_gone_at_the_next_start(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """A reference config left by a killed test (here: no START) would change every later
    pool; the next pool starts without it."""
    pool = running_pool.get(with_startd=True)
    running_pool.close()
    stale = pool.host_path(harness.CONFIG_FILE).with_name("99-execd-killed-test.conf")
    stale.write_text("START = False\n")
    try:
        started = running_pool.get(with_startd=True)
        assert not stale.exists()
        assert [ad.get("Start") for ad in started.status("-slots")] == [True]
    finally:
        stale.unlink(missing_ok=True)


def test_reference_startd_runs_echo(reference_pool: harness.Pool) -> None:
    slots = reference_pool.status("-slots")
    assert slots and all(ad["Activity"] == "Idle" for ad in slots)
    job = reference_pool.submit(ECHO_JOB)
    log = job.wait_for_event("005", RUN_TIMEOUT_S)
    events = job.events()  # 006 (image size) may come between 001 and 005
    assert events[0] == "000" and events.index("001") < events.index("005"), events
    assert re.search(r"Normal termination \(return value 0\)", log), log
    assert job.output("out.txt") == "hi\n"


def test_reference_slot_is_partitionable(reference_pool: harness.Pool) -> None:
    (daemon,) = reference_pool.status("-startd")
    assert daemon["MyType"] == "StartD"
    slots = reference_pool.status("-slots")
    assert [ad.get("PartitionableSlot") for ad in slots] == [True]
