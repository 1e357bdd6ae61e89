"""A d-slot whose job left processes that could not be killed (SlotBrokenReason) keeps
its resources out of the partitionable slot and is still advertised, as HTCondor 25 does
with CONTINUE_TO_ADVERTISE_BROKEN_DYNAMIC_SLOTS; a healthy d-slot gives them back.

The daemon is built as `execd run` builds it, without its cgroup tree (no job runs here:
the broken reason is what a starter's report carries)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from execd.daemon.control import ControlError
from execd.daemon.recovery import recover
from execd.daemon.runtime import Daemon
from tests.component.in_process_daemon import daemon_without_cgroups

JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 256}


def ads(daemon: Daemon) -> dict[str, Any]:
    return {str(ad["Name"]).split("@")[0]: ad for ad in daemon.ads()}


def claim_then_release(daemon: Daemon, broken: str | None) -> str:
    granted = daemon.jobs.request_claim("slot1", JOB)
    if broken is not None:
        daemon.node.mark_broken(granted["slot"], broken)
    daemon.jobs.release(granted["claim_id"])
    for _ in range(3):  # Preempting -> Owner -> Unclaimed -> deleted, a pass at a time
        daemon.evaluate()
    return str(granted["slot"])


def test_a_broken_dslot_keeps_its_resources_out_of_use_and_is_advertised(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        daemon = daemon_without_cgroups(tmp_path)
        healthy = claim_then_release(daemon, None)
        assert healthy not in ads(daemon) and ads(daemon)["slot1"]["Cpus"] == 4
        broken = claim_then_release(daemon, "1 process could not be killed")
        assert broken not in daemon.engine.slots  # no policy runs on it any more
        seen = ads(daemon)
        assert seen[broken]["SlotBrokenReason"] == "1 process could not be killed"
        assert (seen[broken]["State"], seen[broken]["Cpus"], seen[broken]["Start"]) == \
            ("Owner", 1, False)
        assert seen["slot1"]["Cpus"] == 3  # its CPU is not offered again
        with pytest.raises(ControlError, match="3 Cpus are left"):
            daemon.jobs.request_claim("slot1", {**JOB, "RequestCpus": 4})
        assert daemon.jobs.request_claim("slot1", {**JOB, "RequestCpus": 3})["slot"] != broken
        daemon.jobs.store.close()

    asyncio.run(scenario())  # the daemon's parts expect a running loop


def test_a_broken_dslot_still_claimed_at_a_restart_comes_back_claimed_and_broken(
        tmp_path: Path) -> None:
    async def scenario() -> None:
        first = daemon_without_cgroups(tmp_path)
        granted = first.jobs.request_claim("slot1", JOB)
        first.node.mark_broken(granted["slot"], "1 process could not be killed")
        first.jobs.store.close()  # the daemon dies with the claim held

        again = daemon_without_cgroups(tmp_path)
        counts = recover(again.jobs)
        assert (counts["claims"], counts["broken"]) == (1, 2)  # the d-slot and its p-slot
        seen = ads(again)
        assert seen[granted["slot"]]["State"] == "Claimed"
        assert seen[granted["slot"]]["SlotBrokenReason"] == "1 process could not be killed"
        again.jobs.release(granted["claim_id"])
        for _ in range(3):
            again.evaluate()
        assert granted["slot"] not in again.engine.slots
        assert ads(again)["slot1"]["Cpus"] == 3  # released, its CPU is still kept out
        again.jobs.store.close()

    asyncio.run(scenario())
