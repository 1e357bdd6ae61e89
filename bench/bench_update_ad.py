"""`.update.ad`'s cost on the event loop with N running pool jobs, each on its own
dynamic slot of one partitionable slot: the first write as a job starts (its slot's ad
alone, one_public_ad, against every slot's ad as public_ad built it before), and one
advertiser round (every slot's ads, then each job's file when due: the first round
after the start writes all N, a round with nothing changed and no interval due none).
The writes themselves run on the writer's thread; what is timed here is the loop's part.

Run: .venv/bin/python bench/bench_update_ad.py [N]   (root: chown)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.component

from execd import log
from execd.claims.ids import ClaimIdFactory
from execd.daemon.pool import pool_member
from execd.daemon.pool_job import PoolJob
from execd.wire.classad_codec import from_values, long_form
from execd.wire.job_runner import JobLaunch
from tests.component.in_process_daemon import open_daemon

JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 128, "ClusterId": 7,
       "ProcId": 0, "Owner": "nobody", "GlobalJobId": "ap#7.0#1"}  # fmt: skip
NOBODY = 65534


async def bench(n: int, tmp: Path) -> None:
    config = f"NUM_CPUS = {n + 1}\nMEMORY = {128 * (n + 1)}\nCOLLECTOR_HOST = 127.0.0.1:1\n"
    with open_daemon(tmp, config) as daemon:
        member = pool_member(daemon)
        assert member is not None
        member.address = "<127.0.0.1:9618>"
        member.ids = ClaimIdFactory(member.address, int(time.time()))
        daemon.pool = member
        daemon.jobs.tree = object()  # type: ignore[assignment]
        runners = []
        for i in range(n):
            job = {**JOB, "ProcId": i, "GlobalJobId": f"ap#7.{i}#1"}
            claim_id = str(daemon.jobs.request_claim("slot1", job)["claim_id"])
            runner = PoolJob(daemon.jobs, claim_id)
            runner.activate(job, wire=from_values(job).items())
            assert runner.job is not None
            (daemon.jobs.workdir(runner.job.job_id) / "status.json").write_text(
                json.dumps({"CpusUsage": 0.1}))
            sandbox = tmp / "execute" / f"dir_{i}"
            sandbox.mkdir(parents=True)
            os.chown(sandbox, NOBODY, NOBODY)
            runner.runner(JobLaunch(JOB, ["/bin/true"], sandbox, {}, (NOBODY, NOBODY), None))
            runners.append(runner)
        for task in list(daemon.jobs.tasks):
            task.cancel()
        slots = [r.job.slot for r in runners if r.job is not None]
        t0 = time.perf_counter()
        for slot in slots[:20]:
            member.public_ad(slot)
        every = (time.perf_counter() - t0) / 20
        t0 = time.perf_counter()
        for slot in slots:
            member.one_public_ad(slot)
        one = (time.perf_counter() - t0) / n
        for runner in runners:  # the job starts: its first write
            assert runner.update_ad is not None
            runner._first_update_ad(runner.job.slot if runner.job else "")
        for runner in runners:
            assert runner.update_ad is not None
            await runner.update_ad.drained()
        config_due = member.config.__class__(**{**member.config.__dict__, "interval_s": 0.0})
        kept, member.config = member.config, config_due
        t0 = time.perf_counter()
        member.advertised_pairs()  # every job's update due
        due = time.perf_counter() - t0
        for runner in runners:
            assert runner.update_ad is not None
            await runner.update_ad.drained()
        member.config = kept
        t0 = time.perf_counter()
        member.advertised_pairs()  # nothing changed, nothing due
        quiet = time.perf_counter() - t0
        t0 = time.perf_counter()
        pairs = member.ad_pairs()
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        for public, _ in pairs:
            long_form(public)
        forms = time.perf_counter() - t0
        writes = sum(r.update_ad.writes for r in runners if r.update_ad is not None)
        print(f"{n} running pool jobs on {n} dynamic slots; {writes} writes made")
        print(f"first write's ad, every slot's (public_ad, before): {every * 1e3:8.2f} ms")
        print(f"first write's ad, its slot's alone (one_public_ad): {one * 1e3:8.2f} ms")
        print(f"advertiser round, ads only (ad_pairs)            : {bare * 1e3:8.2f} ms")
        print(f"advertiser round, every job's file due           : {due * 1e3:8.2f} ms")
        print(f"advertiser round, none due                       : {quiet * 1e3:8.2f} ms")
        print(f"every ad's long form (on the loop before, now the thread's): "
              f"{forms * 1e3:.2f} ms")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    log.configure(level="warning", fmt="console")
    with tempfile.TemporaryDirectory(prefix="bench-update-ad-") as tmp:
        asyncio.run(bench(n, Path(tmp)))


if __name__ == "__main__":
    main()
