"""Random event sequences (hypothesis) on two slots never break the engine's promises.

- every slot is always in a defined (state, activity);
- a claim's resources are never lost: Claimed/Preempting slots hold a claim, and idle
  states hold none;
- a starter is only spawned for a job that START (as it applies then) accepts;
- the one backfill client is running whenever a slot is Backfill/Busy, and is only
  killed when no slot uses it any more.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from execd import classads
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.states import VALID_PAIRS, Activity, State
from tests.unit.policy_helpers import Driver

POLICY = {
    "START": '(KeyboardIdle > 60) && Owner =!= "mallory"',
    "IS_OWNER": "(START =?= False)",
    "WANT_SUSPEND": "KeyboardIdle < 30",
    "SUSPEND": "KeyboardIdle < 10",
    "CONTINUE": "KeyboardIdle > 100",
    "PREEMPT": "KeyboardIdle < 5",
    "KILL": "KeyboardIdle < 2",
    "RANK": 'Owner == "boss"',
    "MAXJOBRETIREMENTTIME": "60",
    "MachineMaxVacateTime": "20",
    "START_BACKFILL": "KeyboardIdle > 500",
    "EVICT_BACKFILL": "KeyboardIdle < 100",
    "CPUBusy": "LoadAvg > 0.5",
}
FACTS = {"KeyboardIdle": 1000, "LoadAvg": 0.0, "CondorLoadAvg": 0.0}
OWNERS = st.sampled_from(["alice", "boss", "mallory"])
SLOTS = st.sampled_from(["slot1", "slot2"])


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = Driver(POLICY, numbers={"MATCH_TIMEOUT": 30, "KILLING_TIMEOUT": 10,
                                         "ALIVE_INTERVAL": 20}, backfill=True, facts=FACTS)
        self.d.do(self.d.engine.add_slot("slot2", FACTS, self.d.clock.now()))

    def now(self) -> Any:
        return self.d.clock.now()

    def _run(self, call: Any) -> None:
        engine = self.d.engine
        before = len(self.d.actions)
        try:
            self.d.do(call())
        except PolicyError:
            return  # an impossible event is refused, and must change nothing
        for a in self.d.actions[before:]:
            if isinstance(a, act.SpawnStarter):
                slot = engine.slot(a.slot)
                my = engine.machine_ad(slot, self.now())
                # START as it applies now (a drain's start expression replaces it)
                assert classads.is_true(classads.evaluate(engine.start_expr(), my, slot.job_ad))
            if isinstance(a, act.KillBackfillClient):
                assert not any(s.backfill_running for s in engine.slots.values())

    @rule(seconds=st.sampled_from([0, 1, 5, 15, 40, 400]))
    def tick(self, seconds: int) -> None:
        self._run(lambda: self.d.engine.evaluate(self.d.clock.advance(seconds)))

    @rule(name=SLOTS, idle=st.sampled_from([0, 3, 8, 20, 50, 90, 200, 200, 1000, 1000]),
          load=st.sampled_from([0.0, 0.0, 1.0]))
    def facts(self, name: str, idle: int, load: float) -> None:
        self.d.engine.set_facts(name, {**FACTS, "KeyboardIdle": idle, "LoadAvg": load})

    @rule(name=SLOTS)
    def match(self, name: str) -> None:
        self._run(lambda: self.d.engine.match(name, self.now()))

    @rule(name=SLOTS, owner=OWNERS)
    def claim(self, name: str, owner: str) -> None:
        self._run(lambda: self.d.engine.request_claim(
            name, self.d.ids.new(), {"Owner": owner}, self.now()))

    @rule(name=SLOTS, owner=OWNERS)
    def claim_and_activate(self, name: str, owner: str) -> None:
        self.claim(name, owner)
        self.activate(name, owner)

    @rule(name=SLOTS, owner=OWNERS)
    def activate(self, name: str, owner: str) -> None:
        self._run(lambda: self.d.engine.activate(name, {"Owner": owner}, self.now()))

    @rule(name=SLOTS)
    def job_exited(self, name: str) -> None:
        if self.d.engine.slot(name).starter_running:
            self._run(lambda: self.d.engine.job_exited(name, self.now()))

    @rule(name=SLOTS)
    def preempting_claim_released(self, name: str) -> None:
        pending = self.d.engine.slot(name).preempting_claim
        if pending is not None:
            self._run(lambda: self.d.engine.release(name, self.now(), pending.id))

    @rule(name=SLOTS)
    def starter_exited(self, name: str) -> None:
        if self.d.engine.slot(name).starter_running:
            self._run(lambda: self.d.engine.starter_exited(name, self.now()))

    @rule()
    def backfill_exited(self) -> None:
        if self.d.engine.backfill_client != "stopped":
            self._run(lambda: self.d.engine.backfill_client_exited(self.now()))

    @rule(name=SLOTS)
    def alive(self, name: str) -> None:
        self._run(lambda: self.d.engine.alive(name, self.now()))

    @rule(name=SLOTS)
    def release(self, name: str) -> None:
        self._run(lambda: self.d.engine.release(name, self.now()))

    @rule(name=SLOTS, fast=st.booleans())
    def deactivate(self, name: str, fast: bool) -> None:
        self._run(lambda: self.d.engine.deactivate(name, self.now(), fast=fast))

    @rule(name=SLOTS, fast=st.booleans())
    def vacate(self, name: str, fast: bool) -> None:
        self._run(lambda: self.d.engine.vacate(name, self.now(), fast=fast))

    @rule(mode=st.sampled_from(["graceful", "quick", "fast"]),
          start=st.sampled_from([None, None, 'TARGET.Owner == "alice"']))
    def drain(self, mode: str, start: str | None) -> None:
        self._run(lambda: self.d.engine.drain(mode, self.now(), start=start))

    @rule()
    def cancel_drain(self) -> None:
        self._run(lambda: self.d.engine.cancel_drain(self.now()))

    @invariant()
    def defined_state(self) -> None:
        for slot in self.d.engine.slots.values():
            assert (slot.state, slot.activity) in VALID_PAIRS

    @invariant()
    def claims_not_lost(self) -> None:
        for slot in self.d.engine.slots.values():
            if slot.state in (State.CLAIMED, State.PREEMPTING):
                assert slot.claim is not None
            if slot.state in (State.OWNER, State.UNCLAIMED, State.MATCHED, State.DRAINED):
                assert slot.claim is None and not slot.starter_running
            if slot.starter_running:
                assert slot.state in (State.CLAIMED, State.PREEMPTING)

    @invariant()
    def one_backfill_client(self) -> None:
        engine = self.d.engine
        for slot in engine.slots.values():
            if slot.state == State.BACKFILL and slot.activity == Activity.BUSY:
                assert slot.backfill_running and engine.backfill_client == "running"
            if slot.backfill_running:
                assert (slot.state, slot.activity) == (State.BACKFILL, Activity.BUSY)


PolicyMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_policy_state_machine = PolicyMachine.TestCase


def test_time_in_each_state_and_activity_is_published_as_condor_startd_does() -> None:
    """TotalTime<State><Activity>: the seconds spent in each pair so far, the current
    one included; pairs never visited (or for less than a second) are not published."""
    d = Driver()  # Unclaimed at once (IS_OWNER false)
    d.tick(30)
    d.busy()
    d.tick(100)
    attrs = d.engine.attributes("slot1", d.clock.now())
    times = {k: v for k, v in attrs.items() if k.startswith("TotalTime")}
    assert times == {"TotalTimeUnclaimedIdle": 30, "TotalTimeClaimedBusy": 100}, times
    d.starter_exited()
    d.tick(20)
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["TotalTimeClaimedBusy"] == 100  # left: no longer growing
    assert attrs["TotalTimeClaimedIdle"] == 20
