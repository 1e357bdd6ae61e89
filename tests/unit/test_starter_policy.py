"""Seed 002's starter-enforced eviction, evaluated from the starter's measurements."""

from __future__ import annotations

from execd import classads
from execd.starter.policy import StarterAction, StarterPolicy, starter_decision

SEED_EXAMPLE = StarterPolicy(
    evict="ImageSize > (Memory * 1024)",
    want_vacate="True",
    kill="(CurrentTime - EnteredCurrentState) > 5 * 60",
)
JOB = classads.new_ad({"Owner": "alice", "RequestMemory": 100, "KillSig": "SIGTERM"})


def decide(policy: StarterPolicy, **measured: object) -> StarterAction:
    base: dict[str, object] = {"JobState": "Running", "EnteredCurrentState": 1000}
    base.update(measured)
    return starter_decision(policy, JOB, base, memory_mb=100, now=1100)


def test_defaults_never_evict() -> None:
    assert decide(StarterPolicy(), ImageSize=10**9) is StarterAction.NONE


def test_seed_example_vacates_a_job_grown_past_its_slot_memory() -> None:
    assert decide(SEED_EXAMPLE, ImageSize=100 * 1024) is StarterAction.NONE
    assert decide(SEED_EXAMPLE, ImageSize=100 * 1024 + 1) is StarterAction.VACATE


def test_want_vacate_false_kills_at_once_and_undefined_vacates() -> None:
    hard = StarterPolicy(evict="NumProcesses > 10", want_vacate="False")
    assert decide(hard, NumProcesses=11) is StarterAction.KILL
    soft = StarterPolicy(evict="NumProcesses > 10", want_vacate="NoSuchAttribute")
    assert decide(soft, NumProcesses=11) is StarterAction.VACATE


def test_kill_escalates_a_vacating_job_after_five_minutes() -> None:
    assert decide(SEED_EXAMPLE, JobState="Vacating", EnteredCurrentState=900) is (
        StarterAction.NONE
    )
    assert decide(SEED_EXAMPLE, JobState="Vacating", EnteredCurrentState=799) is (
        StarterAction.KILL
    )


def test_job_ad_attributes_are_visible_and_measurements_win() -> None:
    by_owner = StarterPolicy(evict='Owner == "alice" && RemoteUserCpu > 60')
    assert decide(by_owner, RemoteUserCpu=61.0) is StarterAction.VACATE
    assert decide(by_owner, RemoteUserCpu=1.0) is StarterAction.NONE


def test_an_unparsable_expression_never_evicts() -> None:
    assert decide(StarterPolicy(evict="ImageSize >"), ImageSize=1) is StarterAction.NONE
