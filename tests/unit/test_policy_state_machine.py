"""Random event sequences (hypothesis) never break the engine's promises.

- every slot is always in a defined (state, activity);
- a claim's resources are never lost: Claimed/Preempting slots hold a claim, and idle
  states hold none;
- a starter is only spawned for a job that START accepts at that moment.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from execd import classads
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy.states import VALID_PAIRS, State
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
}
OWNERS = st.sampled_from(["alice", "boss", "mallory"])


class PolicyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = Driver(POLICY, numbers={"MATCH_TIMEOUT": 30, "KILLING_TIMEOUT": 10,
                                         "ALIVE_INTERVAL": 20}, backfill=True,
                        facts={"KeyboardIdle": 200, "LoadAvg": 0.0, "CondorLoadAvg": 0.0})

    def _run(self, call: Any) -> None:
        before = len(self.d.actions)
        try:
            self.d.do(call())
        except PolicyError:
            return  # an impossible event is refused, and must change nothing
        for a in self.d.actions[before:]:
            if isinstance(a, act.SpawnStarter):
                slot = self.d.slot
                my = self.d.engine.machine_ad(slot, self.d.clock.now())
                # START as it applies now (a drain's start expression replaces it)
                assert classads.is_true(classads.evaluate(
                    self.d.engine.start_expr(), my, slot.job_ad))

    @rule(seconds=st.sampled_from([0, 1, 5, 15, 40, 400]))
    def tick(self, seconds: int) -> None:
        self._run(lambda: self.d.engine.evaluate(self.d.clock.advance(seconds)))

    @rule(idle=st.sampled_from([0, 3, 8, 20, 50, 90, 200, 200, 200, 1000]))
    def keyboard(self, idle: int) -> None:
        self.d.set_facts(KeyboardIdle=idle)

    @rule()
    def match(self) -> None:
        self._run(lambda: self.d.engine.match("slot1", self.d.clock.now()))

    @rule(owner=OWNERS)
    def claim(self, owner: str) -> None:
        self._run(lambda: self.d.engine.request_claim(
            "slot1", self.d.ids.new(), {"Owner": owner}, self.d.clock.now()))

    @rule(owner=OWNERS)
    def claim_and_activate(self, owner: str) -> None:
        self.claim(owner)
        self.activate(owner)

    @rule(owner=OWNERS)
    def activate(self, owner: str) -> None:
        self._run(lambda: self.d.engine.activate("slot1", {"Owner": owner},
                                                 self.d.clock.now()))

    @rule()
    def job_exited(self) -> None:
        if self.d.slot.starter_running:
            self._run(lambda: self.d.engine.job_exited("slot1", self.d.clock.now()))

    @rule()
    def preempting_claim_released(self) -> None:
        pending = self.d.slot.preempting_claim
        if pending is not None:
            self._run(lambda: self.d.engine.release("slot1", self.d.clock.now(), pending.id))

    @rule()
    def starter_exited(self) -> None:
        if self.d.slot.starter_running:
            self._run(lambda: self.d.engine.starter_exited("slot1", self.d.clock.now()))

    @rule()
    def backfill_exited(self) -> None:
        if self.d.engine.backfill_client != "stopped":
            self._run(lambda: self.d.engine.backfill_client_exited(self.d.clock.now()))

    @rule()
    def alive(self) -> None:
        self._run(lambda: self.d.engine.alive("slot1", self.d.clock.now()))

    @rule()
    def release(self) -> None:
        self._run(lambda: self.d.engine.release("slot1", self.d.clock.now()))

    @rule(fast=st.booleans())
    def vacate(self, fast: bool) -> None:
        self._run(lambda: self.d.engine.vacate("slot1", self.d.clock.now(), fast=fast))

    @rule(mode=st.sampled_from(["graceful", "quick", "fast"]),
          start=st.sampled_from([None, None, 'TARGET.Owner == "alice"']))
    def drain(self, mode: str, start: str | None) -> None:
        self._run(lambda: self.d.engine.drain(mode, self.d.clock.now(), start=start))

    @rule()
    def cancel_drain(self) -> None:
        self._run(lambda: self.d.engine.cancel_drain(self.d.clock.now()))

    @invariant()
    def defined_state(self) -> None:
        slot = self.d.slot
        assert (slot.state, slot.activity) in VALID_PAIRS

    @invariant()
    def claims_not_lost(self) -> None:
        slot = self.d.slot
        if slot.state in (State.CLAIMED, State.PREEMPTING):
            assert slot.claim is not None
        if slot.state in (State.OWNER, State.UNCLAIMED, State.MATCHED, State.DRAINED):
            assert slot.claim is None and not slot.starter_running
        if slot.starter_running:
            assert slot.state in (State.CLAIMED, State.PREEMPTING)
        if slot.state == State.BACKFILL and slot.activity.value == "Busy":
            assert self.d.engine.backfill_client == "running"


PolicyMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_policy_state_machine = PolicyMachine.TestCase
