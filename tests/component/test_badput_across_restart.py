"""BadputCausedByPreemption of a job whose eviction spans a restart in place: the flag the
policy decided as the eviction began (condor_startd's claim keeps it) is stored with the
job and restored, and the restarted daemon's resumed eviction does not decide it again.
Before, the resumed graceful vacate ran retirement_ended before the drain was restored
(a condor_drain's eviction said true; condor_startd and execd without a restart, false)
and a KILL-caused hard kill, resumed fast, said false.

The daemon is built as `execd run` builds it, without its cgroup tree; the job's starter
is a real process (it ignores the soft and hard kill signals, as a starter waiting out
its job's vacate does), adopted by `recover` as after SIGUSR2."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from execd.daemon import procwatch
from execd.daemon.ended_job_ad import ended_job_ad
from execd.daemon.policy_glue import now
from execd.daemon.recovery import recover
from execd.daemon.store import JobRecord
from execd.starter.launcher import StarterHandle
from execd.starter.spec import StarterSpec
from tests.component.in_process_daemon import daemon_without_cgroups, open_daemon
from tests.component.test_latest_vacate_cause import after, running_job

# one static slot, no retirement; KILL true for alice's jobs once they are vacating
CONFIG = ("SLOT_TYPE_1_PARTITIONABLE = False\nMAXJOBRETIREMENTTIME = 0\nWANT_SUSPEND = False\n"
          'KILL = TARGET.Owner == "alice"\n')  # fmt: skip


@pytest.mark.parametrize(("owner", "eviction", "badput"), [
    ("bob", "graceful drain", "false"),  # the drain's badput, not a preemption's
    ("alice", "vacate, then KILL", "true"),  # ResState's KILL: a preemption's
])  # fmt: skip
def test_badput_caused_by_preemption_survives_a_restart_in_place(
        tmp_path: Path, owner: str, eviction: str, badput: str) -> None:  # fmt: skip
    ad = {"Owner": owner, "Cmd": "/bin/sleep", "JobLeaseDuration": 1200}
    starter = subprocess.Popen(["sh", "-c", "trap '' TERM QUIT; exec sleep 600"])

    async def scenario() -> tuple[str, str, dict[str, str]]:
        with open_daemon(tmp_path, CONFIG) as first:
            moment = now()
            job = running_job(first, ad, moment)
            spec = StarterSpec(job.job_id, "slot1", "/bin/sleep", [], {}, owner,
                               str(tmp_path), str(tmp_path / "report.json"), "", "")
            job.handle = StarterHandle(spec, None, pid=starter.pid)
            job.starter_start = procwatch.start_time(starter.pid) or 0
            first.jobs.store.add_job(JobRecord(
                job.job_id, "slot1", job.claim.session_id, job.ad, spec._asdict(),
                starter.pid, job.starter_start, "", str(tmp_path / "sandbox"), job.started))
            at = after(moment, 1)
            if eviction == "graceful drain":
                first.execute(first.engine.drain("graceful", at, reason="test"))
                first.jobs.record_drain("graceful", "test", False)  # as the drain verb does
            else:
                first.execute(first.engine.vacate("slot1", at))
                first.execute(first.engine.evaluate(after(at, 1)))  # KILL: a hard kill
            slot = first.engine.slots["slot1"]
            assert slot.state.value == "Preempting"
            how = "vacating" if eviction == "graceful drain" else "killing"
            assert [r.evicting for r in first.jobs.store.jobs()] == [how]
        second = daemon_without_cgroups(tmp_path, CONFIG, restarting=True)  # SIGUSR2
        try:
            assert recover(second.jobs)["adopted"] == 1
            slot = second.engine.slots["slot1"]
            again = second.jobs.running["slot1"]
            return slot.state.value, slot.activity.value, ended_job_ad(
                second.jobs, again, after(moment, 3).wall)
        finally:
            for task in second.jobs.tasks:
                task.cancel()
            second.jobs.store.close()

    try:
        state, activity, ended = asyncio.run(scenario())
    finally:
        starter.kill()
        starter.wait()
    assert (state, activity) == ("Preempting",
                                 "Vacating" if eviction == "graceful drain" else "Killing")
    assert ended["BadputCausedByPreemption"] == badput
    assert ended["BadputCausedByDraining"] == ("true" if eviction == "graceful drain"
                                               else "false")
