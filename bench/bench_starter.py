"""Starter benchmarks (root, a writable cgroup v2): launch latency, memory, kill latency.

1. Launch latency: from the launch request to the job's first instruction (the job is
   `date +%s%N`), p50/p99 over N jobs, against a bare fork+exec of the same program into
   a cgroup measured in the same run. Goal: p50 under 3x the bare cost. Measured for a
   starter forked from the starter zygote (as the daemon launches them) and a cold one.
2. Per-starter memory while a job runs: RSS and USS (goals: RSS < 15 MB, USS < 4 MB).
3. Kill latency of a 2,000-process fork bomb: cgroup kill decision to empty cgroup
   (goal: < 200 ms).

Usage: PYTHONPATH=. python bench/bench_starter.py [--jobs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.starter_dirs

from ep_memory import smaps_rollup_kb

from execd.cgroups.tree import CgroupTree
from execd.starter.launcher import launch_starter
from execd.starter.spec import StarterSpec
from tests.starter_dirs import NOBODY, job_workdir, private_tree


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def spec_for(tree: CgroupTree, work: Path, i: int, script: str) -> StarterSpec:
    return StarterSpec(
        job_id=f"{i}.0",
        slot_name=f"slot1_{i}",
        cmd="/bin/sh",
        args=["-c", script],
        env={},
        owner="nobody",
        execute_dir=str(work / "execute"),
        report_path=str(work / f"r{i}.json"),
        cgroup_mount=str(tree.hierarchy.mount),
        base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
        iwd=str(work / "iwd"),
        stdout=f"out{i}.txt",
        polling_interval=5.0,
    )


def launch_ms(tree: CgroupTree, work: Path, i: int, zygote: bool) -> float:
    t0 = time.time_ns()
    h = launch_starter(
        spec_for(tree, work, i, "exec date +%s%N"),
        str(work / "spec.json"),
        str(work / "starter.log"),
        zygote=zygote,
    )
    h.wait()
    first = int((work / "iwd" / f"out{i}.txt").read_text())
    return (first - t0) / 1e6


def launch_latency(
    tree: CgroupTree, work: Path, jobs: int
) -> tuple[list[float], list[float], list[float]]:
    starter_ms: list[float] = []
    cold_ms: list[float] = []
    bare_ms: list[float] = []
    launch_ms(tree, work, jobs, zygote=True)  # the first launch starts the zygote
    for i in range(jobs):
        starter_ms.append(launch_ms(tree, work, i, zygote=True))
        cold_ms.append(launch_ms(tree, work, jobs + 1 + i, zygote=False))

        job = tree.job(f"bare{i}")
        job.create()
        procs = str(job.procs_file)

        def enter(procs: str = procs) -> None:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
            os.setgid(NOBODY)
            os.setuid(NOBODY)

        t0 = time.time_ns()
        out = subprocess.run(
            ["/bin/sh", "-c", "exec date +%s%N"],
            preexec_fn=enter,
            capture_output=True,
            check=True,
        ).stdout
        bare_ms.append((int(out) - t0) / 1e6)
        job.destroy()
    return starter_ms, cold_ms, bare_ms


def starter_memory(tree: CgroupTree, work: Path) -> tuple[float, float]:
    h = launch_starter(
        spec_for(tree, work, 9999, "touch ready; exec sleep 1000"),
        str(work / "spec.json"),
        str(work / "starter.log"),
    )
    while not (work / "iwd" / "ready").exists():
        time.sleep(0.01)
    fields = smaps_rollup_kb(h.pid)
    h.hard_kill()
    h.wait()
    uss = fields["Private_Clean"] + fields["Private_Dirty"]
    return fields["Rss"] / 1024, uss / 1024


def fork_bomb_kill(tree: CgroupTree, n: int = 2000) -> tuple[float, int]:
    job = tree.job("bomb")
    job.create()
    procs = str(job.procs_file)

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    script = f"i=0; while [ $i -lt {n} ]; do sleep 1000 & i=$((i+1)); done; echo ready; wait"
    proc = subprocess.Popen(
        ["sh", "-c", script],
        preexec_fn=enter,  # noqa: PLW1509
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    count = len(job.pids())
    t0 = time.perf_counter()
    job.kill()
    elapsed = (time.perf_counter() - t0) * 1000
    proc.stdout.close()
    proc.wait()
    job.destroy()
    return elapsed, count


def fork_bomb_via_starter(
    tree: CgroupTree, work: Path, run: int, n: int = 2000
) -> tuple[float, int]:
    """The same, through a starter: its hard kill (SIGQUIT) to an empty cgroup."""
    ready = f"bomb{run}"
    script = f"i=0; while [ $i -lt {n} ]; do sleep 1000 & i=$((i+1)); done; touch {ready}; wait"
    h = launch_starter(spec_for(tree, work, 9000 + run, script), str(work / "spec.json"),
                       str(work / "starter.log"))
    job = tree.job(f"slot1_{9000 + run}")
    while not (work / "iwd" / ready).exists():
        time.sleep(0.01)
    count = len(job.pids())
    t0 = time.perf_counter()
    h.hard_kill()
    while job.populated():
        time.sleep(0.0005)
    elapsed = (time.perf_counter() - t0) * 1000
    h.wait()
    return elapsed, count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--bombs", type=int, default=5, help="fork-bomb kill runs")
    args = ap.parse_args()
    with private_tree("execd-bench") as tree, job_workdir("execd-bench-") as work:
        s, c, b = launch_latency(tree, work, args.jobs)
        p50s, p50c, p50b = statistics.median(s), statistics.median(c), statistics.median(b)
        print(
            f"launch latency over {args.jobs} jobs: zygote-forked starter p50 {p50s:.1f} ms "
            f"p99 {pct(s, 99):.1f} ms; cold starter p50 {p50c:.1f} ms p99 {pct(c, 99):.1f} ms; "
            f"bare fork+exec into cgroup p50 {p50b:.1f} ms p99 {pct(b, 99):.1f} ms; "
            f"ratio p50 zygote {p50s / p50b:.1f}x, cold {p50c / p50b:.1f}x (goal < 3x)"
        )
        rss, uss = starter_memory(tree, work)
        print(
            f"starter memory while a job runs: RSS {rss:.1f} MB (goal < 15), "
            f"USS {uss:.1f} MB (goal < 4)"
        )
        runs = [fork_bomb_kill(tree) for _ in range(args.bombs)]
        kills = [ms for ms, _ in runs]
        print(f"fork bomb of {runs[0][1]} processes, {args.bombs} runs: cgroup kill to empty "
              f"median {statistics.median(kills):.1f} ms, max {max(kills):.1f} ms (goal < 200)")
        runs = [fork_bomb_via_starter(tree, work, i) for i in range(args.bombs)]
        kills = [ms for ms, _ in runs]
        print(f"fork bomb of {runs[0][1]} processes under a starter, {args.bombs} runs: hard "
              f"kill signal to empty cgroup median {statistics.median(kills):.1f} ms, "
              f"max {max(kills):.1f} ms")


if __name__ == "__main__":
    main()
