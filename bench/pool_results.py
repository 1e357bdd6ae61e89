"""bench_pool's results: one EP's run of the cluster, the comparison, the printed table."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ep_memory import Sample
from user_log import Outcome


@dataclass
class Half:
    """One EP's run of the cluster."""

    ep: str
    jobs: int
    completed: int = 0
    wall_s: float | None = None
    jobs_per_min: float | None = None
    idle_pss_kb: int = 0
    peak_pss_kb: int = 0
    peak_jobs: int = 0
    per_job_kb: float | None = None
    idle_after_pss_kb: int = 0
    error: str | None = None
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("outcomes", "samples")}
        # [seconds, EP PSS kB, EP processes, sandboxes, job processes]
        out["samples"] = [[round(s.t, 2), s.pss_kb, s.processes, s.jobs, s.job_processes]
                          for s in self.samples]  # fmt: skip
        return out


def differences(a: Half, b: Half) -> list[str]:
    """One line per job whose end differs: which of its files or exit, both ways."""
    found = []
    for n in range(a.jobs):
        mine, theirs = a.outcomes.get(n), b.outcomes.get(n)
        if mine is None or theirs is None:
            found.append(f"job {n}: {a.ep} {mine} != {b.ep} {theirs}")
            continue
        for what in ("termination", "stdout", "stderr", "result"):
            if getattr(mine, what) != getattr(theirs, what):
                found.append(f"job {n} {what}: {a.ep} {getattr(mine, what)!r} != "
                             f"{b.ep} {getattr(theirs, what)!r}")  # fmt: skip
    return found


def report(halves: list[Half], args: argparse.Namespace) -> dict[str, Any]:
    """Print the table and the comparison; the JSON record of the run."""
    print(f"\n{args.jobs} jobs (sleep {args.sleep} s each), one partitionable slot of "
          f"{args.cpus} CPUs / {args.memory} MB, load avg {os.getloadavg()[0]:.1f}")
    head = (f"{'EP':<14} {'done':>8} {'wall s':>8} {'jobs/min':>9} {'idle MB':>8} "
            f"{'peak MB':>8} {'peak jobs':>9} {'MB/job':>7} {'after MB':>8}")  # fmt: skip
    print(head)
    mb = lambda kb: f"{kb / 1024:.1f}" if kb else "-"  # noqa: E731
    for h in halves:
        wall, rate = (f"{h.wall_s:.1f}", f"{h.jobs_per_min:.1f}") if h.wall_s else ("-", "-")
        print(f"{h.ep:<14} {h.completed:>4}/{h.jobs:<3} {wall:>8} "
              f"{rate:>9} {mb(h.idle_pss_kb):>8} {mb(h.peak_pss_kb):>8} "
              f"{h.peak_jobs:>9} {mb(None if h.error else h.per_job_kb):>7} "
              f"{mb(h.idle_after_pss_kb):>8}")
    result: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "jobs": args.jobs,
        "sleep_s": args.sleep, "cpus": args.cpus, "memory_mb": args.memory,
        "every_s": args.every, "loadavg": os.getloadavg(),
        "halves": [h.summary() for h in halves],
    }  # fmt: skip
    by_ep = {h.ep: h for h in halves}
    if len(halves) == 2 and not any(h.error for h in halves):
        diff = differences(by_ep["condor_startd"], by_ep["execd"])
        result["identical"] = not diff
        print("results identical (exit codes, stdout, stderr, result files): "
              + ("yes" if not diff else f"NO, {len(diff)} differences"))
        for line in diff[:10]:
            print("  " + line)
        condor, execd = by_ep["condor_startd"], by_ep["execd"]
        if condor.per_job_kb and execd.per_job_kb:
            ratio = execd.per_job_kb / condor.per_job_kb
            result["memory_ratio"] = round(ratio, 3)
            print(f"per-job EP memory execd/condor_startd = {ratio:.2f} (goal < 0.5)")
        if condor.jobs_per_min and execd.jobs_per_min:
            ratio = execd.jobs_per_min / condor.jobs_per_min
            result["throughput_ratio"] = round(ratio, 3)
            print(f"throughput execd/condor_startd = {ratio:.2f} (goal >= 1)")
    for h in halves:
        if h.error:
            print(f"\nFAILED: {h.error}")
    return result
