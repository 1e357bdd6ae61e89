"""`.update.ad` wired into a pool member (execd/daemon/pool.py, pool_job.py, shadow_end.py)
on a real Daemon, its real state store and a PoolMember that is not run (no collector,
no starter: the test gives the job its starter's status file): written as the job
starts and as a restarted daemon adopts it, at the advertiser's rounds but not at a
direct query, no more once the job is done; the job's update takes CpusUsage from it;
the sandbox's removal waits for a write in flight."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest

from execd.claims.ids import ClaimIdFactory
from execd.daemon import update_ad
from execd.daemon.pool import pool_member
from execd.daemon.pool_job import PoolJob
from execd.daemon.runtime import Daemon
from execd.daemon.update_ad import SandboxIdentity
from execd.wire.classad_codec import from_values
from execd.wire.job_runner import JobLaunch
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_end import remove_sandbox
from tests.component.in_process_daemon import open_daemon

JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 256, "ClusterId": 7,
       "ProcId": 0, "Owner": "nobody", "GlobalJobId": "ap#7.0#1"}  # fmt: skip
POOL = "COLLECTOR_HOST = 127.0.0.1:1\nUPDATE_INTERVAL = 300\n"
JOB_UID = JOB_GID = 65534


def member_of(daemon: Daemon) -> None:
    """The daemon's pool membership, as run() would set it up, without listening."""
    member = pool_member(daemon)
    assert member is not None
    member.address = "<127.0.0.1:9618>"
    member.ids = ClaimIdFactory(member.address, int(time.time()))
    daemon.pool = member


def a_sandbox(tmp_path: Path) -> Path:
    sandbox = tmp_path / "execute" / "dir_1"
    sandbox.mkdir(parents=True)
    os.chown(sandbox, JOB_UID, JOB_GID)
    return sandbox


def activated(daemon: Daemon, sandbox: Path) -> PoolJob:
    """A pool job on slot1's claim, its input in `sandbox`; its starter never runs, its
    status file says the job has exec'd."""
    daemon.jobs.tree = object()  # type: ignore[assignment]  # (spawn only waits on the gate)
    claim_id = str(daemon.jobs.request_claim("slot1", JOB)["claim_id"])
    runner = PoolJob(daemon.jobs, claim_id)
    runner.activate(JOB, wire=from_values(JOB).items())
    for task in list(daemon.jobs.tasks):
        task.cancel()
    assert runner.job is not None
    (daemon.jobs.workdir(runner.job.job_id) / "status.json").write_text(
        json.dumps({"CpusUsage": 0.25}))
    runner.runner(JobLaunch(JOB, ["/bin/true"], sandbox, {}, (JOB_UID, JOB_GID), None))
    return runner


def written(sandbox: Path) -> dict[str, str]:
    path = sandbox / ".update.ad"
    if not path.exists():
        return {}
    return dict(line.split(" = ", 1) for line in path.read_text().splitlines())


def test_the_start_writes_the_slots_ad_and_the_update_takes_cpususage(tmp_path: Path) -> None:
    async def main() -> tuple[dict[str, str], dict[str, str], str]:
        with open_daemon(tmp_path, POOL) as daemon:
            member_of(daemon)
            sandbox = a_sandbox(tmp_path)
            runner = activated(daemon, sandbox)
            await runner.start()
            update = await runner.usage()
            assert runner.update_ad is not None and runner.job is not None
            await runner.update_ad.drained()
            return written(sandbox), update, runner.job.slot

    ad, update, slot = asyncio.run(main())
    assert ad["Name"].startswith(f'"{slot}@') and ad["State"] == '"Claimed"'
    assert "ClaimId" not in ad and "Capability" not in ad
    assert update["CpusUsage"] == ad["CPUsUsage"]  # copied from the ad written


def test_a_direct_query_writes_nothing_an_advertiser_round_writes_when_due(
        tmp_path: Path) -> None:  # fmt: skip
    async def main() -> list[int]:
        with open_daemon(tmp_path, POOL) as daemon:
            member_of(daemon)
            assert daemon.pool is not None
            runner = activated(daemon, a_sandbox(tmp_path))
            await runner.start()
            writer = runner.update_ad
            assert writer is not None
            await writer.drained()
            counts = [writer.writes]
            config = daemon.pool.config
            daemon.pool.config = config.__class__(**{**config.__dict__, "interval_s": 0.0})
            daemon.pool.ad_pairs()  # QUERY_STARTD_ADS (condor_who, condor_status -direct)
            await writer.drained()
            counts.append(writer.writes)
            daemon.pool.advertised_pairs()  # a round, the slot's update due
            await writer.drained()
            counts.append(writer.writes)
            daemon.pool.config = config  # UPDATE_INTERVAL = 300 again
            daemon.pool.advertised_pairs()  # a round, its state unchanged, not yet due
            await writer.drained()
            counts.append(writer.writes)
            assert runner.job is not None
            runner.job.done.set()  # the job ended: no write after
            daemon.pool.advertised_pairs()
            await writer.drained()
            counts.append(writer.writes)
            return counts

    assert asyncio.run(main()) == [1, 1, 2, 2, 2]


def test_an_adopted_job_has_its_file_written_at_once(tmp_path: Path) -> None:
    """execd restarted in place: the job's next update has CpusUsage without waiting for
    the next UPDATE_INTERVAL."""
    async def main() -> tuple[dict[str, str], dict[str, str]]:
        with open_daemon(tmp_path, POOL) as daemon:
            member_of(daemon)
            sandbox = a_sandbox(tmp_path)
            first = activated(daemon, sandbox)
            assert first.job is not None
            identity = SandboxIdentity.of(str(sandbox), JOB_UID, JOB_GID)
            adopted = PoolJob.adopted(daemon.jobs, first.claim_id, first.job, 1,
                                      sandbox, identity=identity)  # fmt: skip
            update = await adopted.usage()
            assert adopted.update_ad is not None
            await adopted.update_ad.drained()
            return written(sandbox), update

    ad, update = asyncio.run(main())
    assert "CPUsUsage" in ad and update["CpusUsage"] == ad["CPUsUsage"]


def test_the_sandbox_removal_awaits_a_write_in_flight(tmp_path: Path) -> None:
    """The writer's thread is busy (a slow filesystem) with the job's write queued
    behind: the sandbox is not removed until that write is done with."""
    async def main() -> tuple[bool, bool, bool]:
        with open_daemon(tmp_path, POOL) as daemon:
            member_of(daemon)
            sandbox = a_sandbox(tmp_path)
            runner = activated(daemon, sandbox)
            slow = threading.Event()
            busy = asyncio.ensure_future(update_ad._WORKER.run(30, slow.wait, 30))
            await runner.start()  # its first write queued behind the slow call
            options = ShadowOptions(before_removal=runner.close_update_ad)
            removal = asyncio.ensure_future(remove_sandbox(sandbox, options, False))
            await asyncio.sleep(0.2)
            waited = not removal.done() and sandbox.exists()
            slow.set()
            await asyncio.gather(busy, removal)
            return waited, sandbox.exists(), runner.update_ad is not None \
                and runner.update_ad.writes == 0  # fmt: skip

    assert asyncio.run(main()) == (True, False, True)


def test_a_hung_sandbox_filesystem_holds_no_update(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's thread hangs while rounds come faster than a write's time limit:
    the job's updates go on (the first waits a bounded time, once), one write of the
    job's is queued, and the update carries no CpusUsage from a file never written."""
    monkeypatch.setattr(update_ad, "WRITE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(update_ad, "FIRST_WRITE_WAIT_S", 0.2)
    monkeypatch.setattr(update_ad, "INTERVAL_SLACK", 0.0)  # every round is due

    async def main() -> tuple[float, int, bool]:
        with open_daemon(tmp_path, POOL.replace("300", "1")) as daemon:
            member_of(daemon)
            assert daemon.pool is not None
            runner = activated(daemon, a_sandbox(tmp_path))
            hung = threading.Event()
            stuck = asyncio.ensure_future(update_ad._WORKER.run(30, hung.wait, 30))
            await runner.start()
            loop = asyncio.get_running_loop()
            began = loop.time()
            updates = []
            for _ in range(5):
                daemon.pool.advertised_pairs()
                updates.append(await runner.usage())
                await asyncio.sleep(0.1)
            took = loop.time() - began
            queued = update_ad._WORKER._queue.qsize()
            hung.set()
            await stuck
            assert runner.update_ad is not None
            await runner.update_ad.drained()
            # the first write and the latest round's: not one a round
            return took, queued, any("CpusUsage" in u for u in updates), \
                runner.update_ad.writes  # fmt: skip

    took, queued, has_usage, writes = asyncio.run(main())
    assert took < 2.0 and queued == 1 and not has_usage and writes == 2
