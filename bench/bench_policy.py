"""One full policy pass over claimed dynamic slots with the default desktop policy.

Goals: 1,000 slots under 100 ms; 64 slots at POLLING_INTERVAL 5 under 1% of a core.
Run: PYTHONPATH=$PWD python bench/bench_policy.py

Reports the best of several passes in wall time and in this process's CPU time (the
latter is what a pass costs when others load the machine), the load average, and the
ratio to 1,000 bare classad2 evaluations of SUSPEND in the same run: what any engine
evaluating the desktop policy must pay at least.
"""

from __future__ import annotations

import os
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


def time_pass(n: int, repeats: int = 7) -> tuple[float, float]:
    """Best wall and best CPU seconds of one full pass over n claimed, busy d-slots."""
    engine, now = build(n)
    wall = cpu = float("inf")
    for r in range(repeats):
        t = Now(now.mono + 5 * (r + 1), now.wall + 5 * (r + 1))
        start, start_cpu = time.perf_counter(), time.process_time()
        engine.evaluate(t)
        cpu = min(cpu, time.process_time() - start_cpu)
        wall = min(wall, time.perf_counter() - start)
    assert all(s.activity.value == "Busy" for s in engine.slots.values())
    return wall, cpu


def bare_evaluations(n: int = 1000, repeats: int = 7) -> float:
    """Best wall seconds of n classad2 evaluations of SUSPEND, nothing else."""
    from execd import classads  # noqa: PLC0415 -- only the reference needs it

    expr = classads.parse_expr(DESKTOP["SUSPEND"])
    ads = [classads.new_ad({**FACTS, "MyCurrentTime": 1_700_000_000}) for _ in range(n)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for ad in ads:
            expr.eval(ad)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cpus")
    wall, cpu = time_pass(1000)
    bare = bare_evaluations()
    print(f"policy pass, 1000 claimed d-slots, desktop policy: {wall * 1000:.1f} ms wall, "
          f"{cpu * 1000:.1f} ms cpu (goal < 100 ms); 1000 bare SUSPEND evaluations "
          f"{bare * 1000:.1f} ms, ratio {wall / bare:.1f}x")
    wall64, cpu64 = time_pass(64)
    share = cpu64 / 5.0 * 100
    print(f"policy pass, 64 claimed d-slots: {wall64 * 1000:.2f} ms wall, {cpu64 * 1000:.2f} ms "
          f"cpu; at POLLING_INTERVAL=5 that is {share:.3f}% of one core (goal < 1%)")


if __name__ == "__main__":
    main()
