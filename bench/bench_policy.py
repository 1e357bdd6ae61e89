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
# the owner is away and the load is the job's: the desktop policy keeps jobs running
IDLE_DESKTOP = {"KeyboardIdle": 3600, "LoadAvg": 1.0, "CondorLoadAvg": 1.0}
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


def daemon_poll(n: int = 64, repeats: int = 7) -> float:
    """Best CPU seconds of one poll as `execd run` does it (Daemon.evaluate): refresh the
    load, rebuild the slot ads, hand their facts to the engine, one policy pass; n claimed
    static slots with busy jobs."""
    import tempfile  # noqa: PLC0415 -- only this measurement needs them
    from pathlib import Path  # noqa: PLC0415

    from execd.config.loader import load_config  # noqa: PLC0415
    from execd.config.settings import load_settings  # noqa: PLC0415
    from execd.daemon.node import Node  # noqa: PLC0415
    from execd.daemon.policy_glue import slot_facts  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config"
        path.write_text(f"NUM_CPUS = {n}\nMEMORY = {n * 1024}\nNUM_SLOTS = {n}\n"
                        "SLOT_TYPE_0_PARTITIONABLE = false\n")
        config = load_config(path)
        node = Node.build(config, load_settings(config))
    engine = PolicyEngine(PolicyConfig.from_strings(DESKTOP))
    ids = ClaimIdFactory("<127.0.0.1:9618>", 1)
    job = {"Owner": "alice", "JobUniverse": 5}
    moment = Now(time.monotonic(), time.time())
    for ad in node.ads():
        name = str(ad["Name"]).split("@")[0]
        engine.add_slot(name, {**slot_facts(ad), **IDLE_DESKTOP}, moment)
        engine.request_claim(name, ids.new(), job, moment)
        engine.activate(name, job, moment)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        node.refresh_load(time.time())
        for ad in node.ads():
            name = str(ad["Name"]).split("@")[0]
            engine.set_facts(name, {**slot_facts(ad), **IDLE_DESKTOP})
        engine.evaluate(Now(time.monotonic(), time.time()))
        best = min(best, time.process_time() - start)
    assert all(s.activity.value == "Busy" for s in engine.slots.values())
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
    poll = daemon_poll(64)
    print(f"daemon poll (load, slot ads, facts, policy pass), 64 claimed static slots: "
          f"{poll * 1000:.2f} ms cpu; at POLLING_INTERVAL=5 that is {poll / 5.0 * 100:.3f}% "
          f"of one core (goal < 1%)")


if __name__ == "__main__":
    main()
