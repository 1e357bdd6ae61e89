"""Draining with a start expression, draining cost counters, and the shared backfill client."""

from __future__ import annotations

from typing import Any

import pytest

from execd.errors import PolicyError
from execd.policy import actions as act
from tests.unit.policy_helpers import FACTS, Driver


def pair(d: Driver, name: str) -> str:
    slot = d.engine.slot(name)
    return f"{slot.state.value}/{slot.activity.value}"


def two_slots(expressions: dict[str, str] | None = None, backfill: bool = False,
              **facts: Any) -> Driver:
    d = Driver(expressions, backfill=backfill, facts={**FACTS, **facts})
    d.do(d.engine.add_slot("slot2", {**FACTS, **facts, "Name": "slot2@host"},
                           d.clock.now()))
    return d


def claim(d: Driver, name: str, owner: str) -> bool:
    return bool(d.do(d.engine.request_claim(name, d.ids.new(), {"Owner": owner},
                                            d.clock.now())))


# ---- the drain start expression (condor_drain -start) ---------------------------------
def test_drain_start_expression_lets_matching_jobs_scavenge_until_old_jobs_end() -> None:
    d = two_slots({"MAXJOBRETIREMENTTIME": "1000", "MachineMaxVacateTime": "30"})
    d.busy({"Owner": "alice"})
    d.do(d.engine.drain("graceful", d.clock.now(), start='TARGET.Owner == "scav"'))
    assert d.pair == "Claimed/Retiring" and pair(d, "slot2") == "Unclaimed/Idle"
    attrs = d.engine.attributes("slot2", d.clock.now())
    assert str(attrs["Start"]) == 'TARGET.Owner == "scav"'  # published as START
    # as condor_startd: on every slot, false until a claim is accepted while draining
    assert attrs["AcceptedWhileDraining"] is False
    assert d.engine.attributes("slot1", d.clock.now())["AcceptedWhileDraining"] is False
    assert not claim(d, "slot2", "alice")
    assert claim(d, "slot2", "scav")
    assert d.engine.attributes("slot2", d.clock.now())["AcceptedWhileDraining"] is True
    assert d.do(d.engine.activate("slot2", {"Owner": "scav"}, d.clock.now()))
    d.clock.advance(60)
    d.starter_exited()  # the last job that predates the drain is done
    assert [a for a in d.actions if isinstance(a, act.LogEvent)
            and a.event == "drain_scavenging_over"]
    # the scavenger is evicted with no retirement, its vacate time honoured
    assert pair(d, "slot2") == "Preempting/Vacating" and act.SoftKill("slot2") in d.actions
    assert d.engine.attributes("slot1", d.clock.now())["Start"] is False
    assert d.pair == "Drained/Retiring"
    d.do(d.engine.starter_exited("slot2", d.clock.now()))
    d.tick()
    assert pair(d, "slot2") == "Drained/Idle" and d.pair == "Drained/Idle"


def test_drain_start_on_an_idle_machine_drains_at_once() -> None:
    d = Driver()
    d.do(d.engine.drain("graceful", d.clock.now(), start="True"))
    assert d.pair == "Drained/Idle"


@pytest.mark.parametrize(("mode", "start", "message"), [
    ("quick", "True", "needs a graceful drain"),
    ("graceful", "Owner ==", "drain start expression"),
])
def test_bad_drain_start_is_refused_and_changes_nothing(mode: str, start: str,
                                                        message: str) -> None:
    d = Driver()
    d.busy()
    with pytest.raises(PolicyError, match=message):
        d.do(d.engine.drain(mode, d.clock.now(), start=start))
    assert d.pair == "Claimed/Busy" and not d.engine.draining


def test_cancel_drain_restores_start_and_unretires() -> None:
    d = Driver({"START": "KeyboardIdle > 60", "MAXJOBRETIREMENTTIME": "100",
                "MachineMaxVacateTime": "10"})
    d.busy()
    d.do(d.engine.drain("graceful", d.clock.now(), start="False"))
    assert d.pair == "Claimed/Retiring"
    assert str(d.engine.attributes("slot1", d.clock.now())["Start"]) == "false"
    d.do(d.engine.cancel_drain(d.clock.now()))
    assert str(d.engine.attributes("slot1", d.clock.now())["Start"]) == "KeyboardIdle > 60"
    assert d.pair == "Claimed/Busy" and d.transitions()[-1] == "19"
    d.tick_with_alives(200)
    assert d.pair == "Claimed/Busy"  # the drain's retirement is gone with it


# ---- TotalMachineDrainingUnclaimedTime / TotalMachineDrainingBadput ---------------------
def test_unclaimed_time_counts_cpu_seconds_of_idle_slots_while_draining() -> None:
    d = two_slots({"MAXJOBRETIREMENTTIME": "100"}, Cpus=4)
    d.busy()
    d.do(d.engine.drain("graceful", d.clock.now()))
    d.tick_with_alives(50, step=10)  # slot1 retires (claimed), slot2 sits drained
    d.starter_exited()
    d.tick(10)
    d.tick(40)
    attrs = d.engine.attributes("slot2", d.clock.now())
    assert attrs["TotalMachineDrainingUnclaimedTime"] == 4 * 100 + 4 * 50
    d.do(d.engine.cancel_drain(d.clock.now()))
    d.tick(500)
    assert d.engine.attributes("slot1", d.clock.now())[
        "TotalMachineDrainingUnclaimedTime"] == 600
    assert d.engine.attributes("slot1", d.clock.now())["TotalMachineDrainingBadput"] == 0


def test_badput_counts_cpu_seconds_of_jobs_evicted_by_draining() -> None:
    d = Driver(facts={**FACTS, "Cpus": 2})
    d.busy()
    d.tick_with_alives(30)
    d.do(d.engine.drain("quick", d.clock.now()))
    assert d.engine.attributes("slot1", d.clock.now())["TotalMachineDrainingBadput"] == 60


# ---- backfill: one client per daemon ----------------------------------------------------
BACKFILL = {"START_BACKFILL": "KeyboardIdle > 60", "EVICT_BACKFILL": "KeyboardIdle < 60"}


def test_one_backfill_client_serves_every_backfill_slot() -> None:
    d = two_slots(BACKFILL, backfill=True)
    assert d.pair == pair(d, "slot2") == "Backfill/Busy"
    assert d.of_type(act.StartBackfillClient) == [act.StartBackfillClient()]


def test_a_slot_leaving_backfill_keeps_the_client_for_the_others() -> None:
    d = two_slots(BACKFILL, backfill=True)
    assert claim(d, "slot1", "alice")
    assert d.pair == "Claimed/Idle" and pair(d, "slot2") == "Backfill/Busy"
    assert d.transitions()[-3:] == ["28", "29", "31"]
    assert not d.of_type(act.KillBackfillClient)
    # the last backfill slot's EVICT_BACKFILL kills the client, then leaves to Owner
    d.engine.set_facts("slot2", {**FACTS, "KeyboardIdle": 1})
    d.tick(5)
    assert pair(d, "slot2") == "Backfill/Killing"
    assert d.of_type(act.KillBackfillClient) == [act.KillBackfillClient()]
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert pair(d, "slot2") == "Unclaimed/Idle"
    assert d.transitions()[-3:] == ["29", "30", "1"]


def test_a_client_that_exits_on_its_own_is_respawned_once() -> None:
    d = two_slots(BACKFILL, backfill=True)
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert d.transitions().count("27") == 2
    assert d.of_type(act.StartBackfillClient) == [act.StartBackfillClient()] * 2
    assert d.pair == pair(d, "slot2") == "Backfill/Busy"


def test_shutdown_leaves_backfill_through_killing_with_one_kill() -> None:
    d = two_slots(BACKFILL, backfill=True)
    d.do(d.engine.shutdown("graceful", d.clock.now()))
    assert d.of_type(act.KillBackfillClient) == [act.KillBackfillClient()]
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    # and no slot goes back into Backfill while the daemon shuts down
    assert pair(d, "slot1") == pair(d, "slot2") == "Unclaimed/Idle"


def test_slot_waits_for_a_dying_client_before_respawning() -> None:
    d = two_slots(BACKFILL, backfill=True)
    d.do(d.engine.vacate("slot1", d.clock.now()))  # released at once, slot2 still uses it
    d.do(d.engine.vacate("slot2", d.clock.now()))  # the last user: kill the client
    d.tick(5)  # slot1 is back in Backfill/Idle but the client is still dying
    assert d.pair == "Backfill/Idle"
    assert d.of_type(act.StartBackfillClient) == [act.StartBackfillClient()]
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert d.of_type(act.StartBackfillClient) == [act.StartBackfillClient()] * 2
    assert d.pair == "Backfill/Busy"


def test_no_claim_while_draining_even_on_a_new_dynamic_slot() -> None:
    d = Driver()
    d.do(d.engine.drain("graceful", d.clock.now()))
    d.do(d.engine.add_slot("slot1_1", FACTS, d.clock.now(), dynamic=True, parent="slot1"))
    assert not claim(d, "slot1_1", "alice")
    refused = [a for a in d.actions if isinstance(a, act.LogEvent) and a.event == "claim_refused"]
    assert refused[-1].fields["why"] == "draining"


def test_graceful_drain_lets_every_job_retire_as_long_as_the_longest() -> None:
    d = two_slots({"MAXJOBRETIREMENTTIME": "2000", "MachineMaxVacateTime": "10"})
    d.busy({"Owner": "a", "MaxJobRetirementTime": 100})
    assert d.do(d.engine.request_claim("slot2", d.ids.new(), {"Owner": "b"}, d.clock.now()))
    assert d.do(d.engine.activate("slot2", {"Owner": "b", "MaxJobRetirementTime": 1000},
                                  d.clock.now()))
    d.do(d.engine.drain("graceful", d.clock.now()))
    d.tick_with_alives(500, step=10)  # slot1's own 100 s are long gone: it still runs
    assert d.pair == pair(d, "slot2") == "Claimed/Retiring"
    d.tick_with_alives(500, step=10)  # (slot2's lease, 1800 s, needs no alives here)
    # both are soft-killed together, the vacate time before the longest retirement ends
    assert d.pair == pair(d, "slot2") == "Preempting/Vacating"
    assert d.engine.slot("slot1").entered_state == d.engine.slot("slot2").entered_state


def test_resume_on_completion_resumes_every_slot() -> None:
    d = two_slots()
    d.busy()
    d.do(d.engine.drain("quick", d.clock.now(), resume_on_completion=True))
    d.starter_exited()
    d.tick(5)
    assert d.pair == pair(d, "slot2") == "Unclaimed/Idle"
    assert not d.engine.draining


def test_an_idle_scavenging_claim_is_kept_while_its_job_satisfies_the_start() -> None:
    d = two_slots({"MAXJOBRETIREMENTTIME": "1000", "MachineMaxVacateTime": "30"})
    d.busy({"Owner": "alice"})
    d.do(d.engine.drain("graceful", d.clock.now(), start="TARGET.Scavenger =?= true"))
    assert d.do(d.engine.request_claim("slot2", d.ids.new(), {"Scavenger": True},
                                       d.clock.now()))
    d.tick_with_alives(30, step=10)  # the claim waits, idle, for its job
    assert pair(d, "slot2") == "Claimed/Idle"


# ---- ExpectedMachine*Draining* (condor_defrag's view) ----------------------------------
def test_drain_estimates_count_the_running_jobs_cpu_seconds_and_wait() -> None:
    """condor_startd's ResMgr::compute_draining_attrs: a 2-CPU job 100 s in, with 3600 s
    of retirement and a 600 s vacate time, loses 2*(100+600) cpu-seconds if drained
    fast, 2*(100+3500) if drained gracefully, and is gone in 600 or 3500 s."""
    d = two_slots({"MAXJOBRETIREMENTTIME": "3600", "MachineMaxVacateTime": "10 * 60"},
                  Cpus=2)
    d.busy()
    d.tick(100)
    attrs = d.engine.attributes("slot2", d.clock.now())  # every slot says it
    wall = int(d.clock.wall)
    assert {k: v for k, v in attrs.items() if k.startswith("ExpectedMachine")} == {
        "ExpectedMachineQuickDrainingBadput": 2 * (100 + 600),
        "ExpectedMachineGracefulDrainingBadput": 2 * (100 + 3500),
        "ExpectedMachineQuickDrainingCompletion": wall + 600,
        "ExpectedMachineGracefulDrainingCompletion": wall + 3500,
    }


def test_drain_estimates_of_an_idle_machine_keep_the_time_it_became_idle() -> None:
    d = Driver()
    d.tick(1)
    idle_since = int(d.clock.wall)
    d.tick(300)
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["ExpectedMachineGracefulDrainingCompletion"] == idle_since
    assert attrs["ExpectedMachineQuickDrainingCompletion"] == idle_since
    assert attrs["ExpectedMachineGracefulDrainingBadput"] == 0
    d.busy()  # a job (vacate time 600 by default), then idle again: a new "since"
    d.tick(10)
    assert d.engine.attributes("slot1", d.clock.now())[
        "ExpectedMachineQuickDrainingCompletion"] == int(d.clock.wall) + 600
    d.starter_exited()
    d.tick(5)
    assert d.engine.attributes("slot1", d.clock.now())[
        "ExpectedMachineQuickDrainingCompletion"] == int(d.clock.wall)


def test_an_endless_retirement_is_a_capped_integer() -> None:
    d = Driver({"MAXJOBRETIREMENTTIME": "2147483647 * 4"})
    d.busy()
    d.tick(5)
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["ExpectedMachineGracefulDrainingCompletion"] == 2**31 - 1
    assert attrs["ExpectedMachineGracefulDrainingBadput"] == 2**31 - 1


def test_slot_weight_and_the_policy_times_are_published_as_configured() -> None:
    d = Driver({"SLOT_WEIGHT": "Cpus * 2", "MAXJOBRETIREMENTTIME": "3600"})
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert str(attrs["SlotWeight"]) == "Cpus * 2"
    assert str(attrs["MaxJobRetirementTime"]) == "3600"
    assert str(attrs["MachineMaxVacateTime"]) == "600"
    assert str(Driver().engine.attributes("slot1", d.clock.now())["SlotWeight"]) == "Cpus"


def test_a_claim_waiting_for_the_backfill_client_is_dropped_and_told_at_a_shutdown() -> None:
    d = Driver(BACKFILL, backfill=True)
    assert d.pair == "Backfill/Busy"
    claim_id = d.ids.new()
    assert d.do(d.engine.request_claim("slot1", claim_id, {"Owner": "alice"}, d.clock.now()))
    assert d.pair == "Backfill/Killing"  # the claim waits for the client to go
    d.do(d.engine.shutdown("graceful", d.clock.now()))
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    assert d.pair == "Unclaimed/Idle"
    assert d.slot.claim is None and d.slot.preempting_claim is None
    # its holder is told (the daemon forgets the claim), as any dropped waiting claim
    assert act.NotifyClaimHolder("slot1", str(claim_id), "backfill ended for the owner") \
        in d.actions  # fmt: skip
