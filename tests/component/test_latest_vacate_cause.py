"""Which reason an evicted job's shadow is told when more than one cause came along: the
latest, as condor_startd's setVacateReason keeps the last one given (retire_claim,
kill_claim and release_claim each overwrite it); and which evictions the run's
STARTD_HISTORY record calls a preemption's badput.

The daemon is built as `execd run` builds it, without its cgroup tree: the job is
registered as JobManager.activate registers a pool job whose starter waits for its
input (none runs here), and time is passed to the engine as to any policy evaluation."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from execd.daemon.ended_job_ad import ended_job_ad
from execd.daemon.job import Job
from execd.daemon.policy_glue import now
from execd.daemon.runtime import Daemon
from execd.policy import actions as act
from execd.policy import commands
from execd.policy.slot import Now
from execd.starter.launcher import StarterHandle
from execd.starter.spec import StarterSpec
from tests.component.in_process_daemon import open_daemon

# one static slot; PREEMPT true for alice's jobs; 1000 s of retirement (its lease is 1200 s)
CONFIG = ("SLOT_TYPE_1_PARTITIONABLE = False\nMAXJOBRETIREMENTTIME = 1000\n"
          'PREEMPT = TARGET.Owner == "alice"\nWANT_SUSPEND = False\n')  # fmt: skip
ALICE = {"Owner": "alice", "Cmd": "/bin/sleep", "JobLeaseDuration": 1200}
BOB = {**ALICE, "Owner": "bob"}  # PREEMPT stays false


def after(moment: Now, seconds: float) -> Now:
    return Now(moment.mono + seconds, moment.wall + seconds)


def clock() -> Callable[[float], Now]:
    """at(seconds): the moment that long after now."""
    moment = now()
    return lambda seconds: after(moment, seconds)


def running_job(daemon: Daemon, ad: dict[str, object], moment: Now) -> Job:
    """A pool job activated on slot1's new claim at `moment`, registered as
    JobManager.activate registers one whose starter waits for its input."""
    jobs = daemon.jobs
    granted = jobs.request_claim("slot1", ad)
    claim = jobs.lookup(granted["claim_id"])[1]
    job = Job("pool.1#1.0", "slot1", claim, dict(ad))
    jobs.running["slot1"], jobs.jobs[job.job_id] = job, job
    started, actions = daemon.engine.activate("slot1", dict(ad), moment)
    assert started
    daemon.execute([a for a in actions if not isinstance(a, act.SpawnStarter)])
    return job


@pytest.mark.parametrize(("drained", "told"), [
    (False, ("PREEMPT expression evaluated to True", 1011, 0)),
    (True, ("Startd was draining", 1014, 0)),  # condor_startd 25: 1014 (execd said 1011)
])  # fmt: skip
def test_a_job_retiring_for_preempt_then_drained_is_told_the_drain(
        tmp_path: Path, drained: bool, told: tuple[str, int, int]) -> None:  # fmt: skip
    async def scenario() -> tuple[str, tuple[str, int, int] | None]:
        with open_daemon(tmp_path, CONFIG) as daemon:
            at = clock()
            job = running_job(daemon, ALICE, at(0))
            daemon.execute(daemon.engine.evaluate(at(1)))  # PREEMPT: it retires
            slot = daemon.engine.slots["slot1"]
            assert (slot.state.value, slot.activity.value) == ("Claimed", "Retiring")
            if drained:
                daemon.execute(daemon.engine.drain("graceful", at(2), reason="test"))
            daemon.execute(daemon.engine.evaluate(at(1100)))  # the retirement is over
            return slot.state.value, job.vacate_reason

    state, reason = asyncio.run(scenario())
    assert state == "Preempting"
    assert reason == told


@pytest.mark.parametrize(("suspended", "told"), [
    (False, ("Startd was draining", 1014, 0)),
    (True, None),  # condor_startd 25.14.1: 1005, no reason (execd said 1014)
])  # fmt: skip
def test_a_drained_job_suspended_and_continued_is_told_no_reason(
        tmp_path: Path, suspended: bool, told: tuple[str, int, int] | None) -> None:  # fmt: skip
    """condor_startd clears the vacate reason when a retiring job is suspended, and
    CONTINUE takes it back to Retiring without one (measured in the pool: a graceful
    drain, SUSPEND true for a while during the retirement, then its end: the 004 says
    "Unspecified job interruption", 1005). Suspended here by SUSPEND_CLAIM's path."""
    async def scenario() -> tuple[str, tuple[str, int, int] | None]:
        with open_daemon(tmp_path, CONFIG) as daemon:
            at = clock()
            job = running_job(daemon, BOB, at(0))
            daemon.execute(daemon.engine.drain("graceful", at(1), reason="test"))
            slot = daemon.engine.slots["slot1"]
            assert slot.activity.value == "Retiring"
            if suspended:
                daemon.execute(commands.suspend_claim(daemon.engine, "slot1", at(2)))
                assert slot.activity.value == "Suspended"
                daemon.execute(commands.continue_claim(daemon.engine, "slot1", at(3)))
                assert slot.activity.value == "Retiring"
            daemon.execute(daemon.engine.evaluate(at(1100)))  # the retirement is over
            return slot.state.value, job.vacate_reason

    state, reason = asyncio.run(scenario())
    assert state == "Preempting"
    assert reason == told


FIRST = {  # the graceful form of each command: the job retires for it
    "vacate": lambda engine, at: engine.vacate("slot1", at),
    "drain": lambda engine, at: engine.drain("graceful", at, reason="test"),
    "shutdown": lambda engine, at: engine.shutdown("graceful", at),
}
THEN_FAST = {  # ... and its fast form: a kill with a cause of its own
    "vacate": lambda engine, at: engine.vacate("slot1", at, fast=True),
    "drain": lambda engine, at: engine.drain("fast", at, reason="test"),
    "shutdown": lambda engine, at: engine.shutdown("fast", at),
}


@pytest.mark.parametrize("continued", [True, False])
@pytest.mark.parametrize(("command", "told"), [
    ("vacate", ("Claim vacated by the administrator", 1010, 0)),  # condor_vacate -fast
    ("drain", ("Startd was draining", 1014, 0)),  # condor_drain -fast
    ("shutdown", ("Startd was shutdown", 1013, 0)),  # SIGQUIT (condor_off -fast)
])  # fmt: skip
def test_a_fast_command_after_a_suspension_in_its_retirement_gives_its_reason(
        tmp_path: Path, command: str, told: tuple[str, int, int],
        continued: bool) -> None:  # fmt: skip
    """The graceful form of a command, SUSPEND_CLAIM (which clears the retirement's
    reason), maybe CONTINUE_CLAIM, then the fast form of the same command: that kill is a
    cause of its own and the shadow is told it, as condor_startd's kill_claim sets it
    (execd said none: the fast form was taken for the retirement's end)."""
    async def scenario() -> tuple[str, tuple[str, int, int] | None]:
        with open_daemon(tmp_path, CONFIG) as daemon:
            at = clock()
            job = running_job(daemon, BOB, at(0))
            daemon.execute(FIRST[command](daemon.engine, at(1)))
            slot = daemon.engine.slots["slot1"]
            assert slot.activity.value == "Retiring"
            daemon.execute(commands.suspend_claim(daemon.engine, "slot1", at(2)))
            assert slot.activity.value == "Suspended"
            if continued:
                daemon.execute(commands.continue_claim(daemon.engine, "slot1", at(3)))
                assert slot.activity.value == "Retiring"
            daemon.execute(THEN_FAST[command](daemon.engine, at(4)))
            return slot.state.value, job.vacate_reason

    state, reason = asyncio.run(scenario())
    assert state == "Preempting"
    assert reason == told


EVICTIONS = {  # how the startd evicts a running job, and what its STARTD_HISTORY says
    "released": lambda engine, at: engine.release("slot1", at),  # the schedd's RELEASE_CLAIM
    "deactivated, then released": lambda engine, at: [
        *engine.deactivate("slot1", at), *engine.release("slot1", at)],
    "shut down fast": lambda engine, at: engine.shutdown("fast", at),  # SIGQUIT
    # alice's: PREEMPT, then the retirement is over
    "preempted": lambda engine, at: engine.evaluate(after(at, 1100)),
    # bob's (no PREEMPT): condor_vacate -fast, kill_claim
    "vacated fast": lambda engine, at: engine.vacate("slot1", at, fast=True),
    # condor_vacate: retire_claim, then the retirement's end (xa_retirement_expired)
    "vacated": lambda engine, at: [*engine.vacate("slot1", at),
                                   *engine.evaluate(after(at, 1100))],
    # SIGTERM: releaseAllClaims retires the claim, then the retirement's end
    "shut down": lambda engine, at: [*engine.shutdown("graceful", at),
                                     *engine.evaluate(after(at, 1100))],
    # a p-slot taking a d-slot back (ALLOW_PSLOT_PREEMPTION): kill_claim
    "killed for the p-slot": lambda engine, at: commands.kill_claim(
        engine, "slot1", at, "pslot_preemption"),
}
@pytest.mark.parametrize(("eviction", "badput"), [
    ("released", "false"),  # condor_startd's kill_claim sets no badput (execd said true)
    ("deactivated, then released", "false"),
    ("shut down fast", "false"),  # killAllClaims: neither (execd said true)
    ("preempted", "true"),  # ResState's xa_preempt_and_retire
    ("vacated fast", "false"),  # (execd said true: measured false on condor_startd)
    ("vacated", "true"),  # measured true on condor_startd
    ("shut down", "true"),  # measured true on condor_startd (execd said false)
    ("killed for the p-slot", "false"),  # kill_claim (execd said true)
])  # fmt: skip
def test_only_a_preemption_is_recorded_as_badput_caused_by_preemption(
        tmp_path: Path, eviction: str, badput: str) -> None:  # fmt: skip
    """BadputCausedByPreemption in the run's STARTD_HISTORY ad: condor_startd sets it
    from its policy (PREEMPT, KILL, a retirement's end while not draining: a graceful
    condor_vacate or shutdown, a preempting claim), never for a command's kill_claim
    (the schedd's RELEASE_CLAIM, condor_vacate -fast, a fast shutdown, a p-slot's
    preemption), whatever reason the job is told; execd decided it from that reason."""
    async def scenario() -> dict[str, str]:
        with open_daemon(tmp_path, CONFIG) as daemon:
            moment = now()
            job = running_job(daemon, ALICE if eviction == "preempted" else BOB, moment)
            at = after(moment, 1)
            if eviction == "preempted":
                daemon.execute(daemon.engine.evaluate(at))  # PREEMPT: it retires
            daemon.execute(EVICTIONS[eviction](daemon.engine, at))
            assert daemon.engine.slots["slot1"].state.value == "Preempting"
            assert job.evicted
            return ended_job_ad(daemon.jobs, job, at.wall)

    ad = asyncio.run(scenario())
    assert ad["BadputCausedByPreemption"] == badput
    assert ad["BadputCausedByDraining"] == "false"


def test_a_stale_jobs_end_does_not_take_the_slots_later_claims_badput(tmp_path: Path) -> None:
    """A job that ends after its slot went on to another claim (a d-slot name carved
    again) records its own claim's flag, not the flag the slot's new claim has: as
    ended_job_ad, the job's end takes the slot's flag only while the slot holds its claim."""
    async def scenario() -> dict[str, str]:
        with open_daemon(tmp_path, CONFIG) as daemon:
            moment = now()
            running_job(daemon, ALICE, moment)
            daemon.execute(daemon.engine.evaluate(after(moment, 1)))  # PREEMPT: it retires
            assert daemon.engine.slots["slot1"].preemption_badput  # alice's claim's flag
            report = tmp_path / "stale-report.json"
            report.write_text(json.dumps({"ExitCode": 0, "ExitReason": "exited"}))
            stale = Job("pool.1#0.0", "slot1", daemon.jobs.ids.new(), dict(BOB))
            spec = StarterSpec(stale.job_id, "slot1", "/bin/sleep", [], {}, "bob",
                               str(tmp_path), str(report), "", "")
            stale.handle = StarterHandle(spec, None, pid=2**22 + 1)  # gone: no such pid
            daemon.jobs.finish(stale)
            return ended_job_ad(daemon.jobs, stale, after(moment, 2).wall)

    ad = asyncio.run(scenario())
    assert ad["BadputCausedByPreemption"] == "false"
