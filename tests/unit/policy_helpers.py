"""A fake clock and a small driver for the policy engine."""

from __future__ import annotations

from typing import Any

from execd.claims.ids import ClaimIdFactory
from execd.policy import actions as act
from execd.policy.config import PolicyConfig
from execd.policy.engine import PolicyEngine
from execd.policy.slot import Now

FACTS = {"Name": "slot1@host", "Cpus": 1, "Memory": 1024, "KeyboardIdle": 3600,
         "LoadAvg": 0.0, "CondorLoadAvg": 0.0, "Machine": "host"}


class Clock:
    def __init__(self) -> None:
        self.mono = 1000.0
        self.wall = 1_700_000_000.0

    def now(self) -> Now:
        return Now(self.mono, self.wall)

    def advance(self, seconds: float) -> Now:
        self.mono += seconds
        self.wall += seconds
        return self.now()


class Driver:
    def __init__(self, expressions: dict[str, str] | None = None,
                 numbers: dict[str, float] | None = None, backfill: bool = False,
                 facts: dict[str, Any] | None = None) -> None:
        self.clock = Clock()
        self.engine = PolicyEngine(PolicyConfig.from_strings(expressions, numbers, backfill))
        self.ids = ClaimIdFactory("<10.0.0.1:9618>", 1700000000, lambda n: "ab" * n)
        self.actions: list[act.Action] = []
        self.actions += self.engine.add_slot("slot1", facts or FACTS, self.clock.now())

    @property
    def slot(self) -> Any:
        return self.engine.slot("slot1")

    @property
    def pair(self) -> str:
        return f"{self.slot.state.value}/{self.slot.activity.value}"

    def transitions(self) -> list[str]:
        return [str(a.fields["transition"]) for a in self.actions
                if isinstance(a, act.LogEvent) and a.event == "slot_state_changed"]

    def do(self, result: Any) -> Any:
        if isinstance(result, tuple):
            self.actions += result[1]
            return result[0]
        self.actions += result
        return result

    def tick(self, seconds: float = 0.0) -> list[act.Action]:
        before = len(self.actions)
        self.do(self.engine.evaluate(self.clock.advance(seconds)))
        return self.actions[before:]

    def tick_with_alives(self, seconds: float, step: float = 60.0) -> None:
        """Let time pass while the schedd keeps the claim alive."""
        while seconds > 0:
            self.do(self.engine.alive("slot1", self.clock.now()))
            self.tick(min(step, seconds))
            seconds -= step

    def claim(self, job: dict[str, Any] | None = None, slot: str = "slot1") -> bool:
        return bool(self.do(self.engine.request_claim(
            slot, self.ids.new(), job or {"Owner": "alice"}, self.clock.now())))

    def activate(self, job: dict[str, Any] | None = None) -> bool:
        return bool(self.do(self.engine.activate("slot1", job or {"Owner": "alice"},
                                                 self.clock.now())))

    def starter_exited(self) -> None:
        self.do(self.engine.starter_exited("slot1", self.clock.now()))

    def set_facts(self, **kv: Any) -> None:
        facts = dict(self.slot.facts)
        facts.update(kv)
        self.engine.set_facts("slot1", facts)

    def busy(self, job: dict[str, Any] | None = None) -> None:
        assert self.claim(job)
        assert self.activate(job)
        assert self.pair == "Claimed/Busy"

    def of_type(self, kind: type) -> list[Any]:
        return [a for a in self.actions if isinstance(a, kind)]
