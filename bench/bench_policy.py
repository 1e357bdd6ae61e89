"""One full policy pass over claimed dynamic slots with the default desktop policy.

Goals: 1,000 slots under 100 ms; 64 slots at POLLING_INTERVAL 5 under 1% of a core.
Run: PYTHONPATH=$PWD python bench/bench_policy.py
"""

from __future__ import annotations

import time

from execd.claims.ids import ClaimIdFactory
from execd.policy.config import PolicyConfig
from execd.policy.engine import PolicyEngine
from execd.policy.slot import Now

# The desktop policy (seed 003 "Examples of Policy Configuration", use POLICY : Desktop).
DESKTOP = {
    "START": "(KeyboardIdle > 15 * 60) && ((LoadAvg - CondorLoadAvg) <= 0.3)",
    "IS_OWNER": "(START =?= False)",
    "WANT_SUSPEND": "True",
    "SUSPEND": "(KeyboardIdle < 60) || ((LoadAvg - CondorLoadAvg) > 0.5)",
    "CONTINUE": "(KeyboardIdle > 15 * 60) && ((LoadAvg - CondorLoadAvg) <= 0.3)",
    "PREEMPT": "((Activity == \"Suspended\") && ((MyCurrentTime - EnteredCurrentActivity)"
               " > 10 * 60))",
    "KILL": "((MyCurrentTime - EnteredCurrentActivity) > 10 * 60)",
}
FACTS = {"KeyboardIdle": 3600, "LoadAvg": 1.0, "CondorLoadAvg": 1.0, "Cpus": 1,
         "Memory": 1024}


def build(n: int) -> tuple[PolicyEngine, Now]:
    now = Now(1000.0, 1_700_000_000.0)
    engine = PolicyEngine(PolicyConfig.from_strings(DESKTOP))
    ids = ClaimIdFactory("<127.0.0.1:9618>", 1)
    job = {"Owner": "alice", "JobUniverse": 5}
    for i in range(n):
        name = f"slot1_{i + 1}"
        engine.add_slot(name, FACTS, now, dynamic=True, parent="slot1")
        engine.request_claim(name, ids.new(), job, now)
        engine.activate(name, job, now)
    return engine, now


def time_pass(n: int, repeats: int = 5) -> float:
    engine, now = build(n)
    best = float("inf")
    for r in range(repeats):
        t = Now(now.mono + 5 * (r + 1), now.wall + 5 * (r + 1))
        start = time.perf_counter()
        engine.evaluate(t)
        best = min(best, time.perf_counter() - start)
    assert all(s.activity.value == "Busy" for s in engine.slots.values())
    return best


def main() -> None:
    t1000 = time_pass(1000)
    print(f"policy pass, 1000 claimed d-slots, desktop policy: {t1000 * 1000:.1f} ms "
          f"(goal < 100 ms)")
    t64 = time_pass(64)
    share = t64 / 5.0 * 100
    print(f"policy pass, 64 claimed d-slots: {t64 * 1000:.2f} ms; at POLLING_INTERVAL=5 "
          f"that is {share:.3f}% of one core (goal < 1%)")


if __name__ == "__main__":
    main()
