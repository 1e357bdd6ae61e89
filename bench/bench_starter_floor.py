"""What one zygote-forked starter costs in private memory, stage by stage (root, cgroup v2).

Issue 10's memory goal counts an execute point's memory per running job. A starter forked
from the starter zygote shares its pages with the zygote until either side writes them:
what it costs is its private dirty pages (smaps Private_Dirty). This measures them at
each stage of a real job (`/bin/sleep` as nobody, in its own cgroup), so that what a
Python starter cannot go below is a number, for each interpreter given with --python:

- `bare fork`: a `python -S` that has imported nothing forks a child that stops at once:
  the interpreter's own floor;
- `fork`: the same from a zygote that has imported the starter and planned the job;
- `start`: the job is running in its cgroup (Starter.start has returned);
- `poll1`, `poll5`: after the first and fifth measurement of the job (polling every 0.2 s).

The child stops itself (SIGSTOP) at its stage; this process, not its parent, reads its
smaps, so the reading allocates nothing in the zygote. The zygote used here is
bench/starter_stages.py: execd.starter.zygote's loop with the stages added (it imports,
prepares, forks and runs the same way); `--warm N` first runs N real /bin/true jobs
inside the zygote, to show what warming the starter's code up there would save.

Usage: .venv/bin/python bench/bench_starter_floor.py [--python /usr/bin/python3.12 ...]
       [--reps 3] [--warm 0]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ep_memory import smaps_rollup_kb  # bench/, beside this script

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.starter_dirs

STAGES = ["fork", "start", "poll1", "poll5"]  # --stages: any pollN


def spec(where: tuple[str, str, Path], name: str, cmd: str, args: list[str]) -> str:
    mount, base_cgroup, work = where
    path = work / f"{name}.json"
    path.write_text(json.dumps({
        "job_id": name, "slot_name": name, "cmd": cmd, "args": args, "env": {},
        "owner": "nobody", "execute_dir": str(work / "execute"),
        "report_path": str(work / f"{name}.report"), "cgroup_mount": mount,
        "base_cgroup": base_cgroup, "status_path": str(work / f"{name}.status"),
        "polling_interval": 0.2,
    }))
    return str(path)


def private_dirty_kb(pid: int) -> int:
    return smaps_rollup_kb(pid)["Private_Dirty"]


def wait_stopped(pid: int) -> None:
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "T":
            return
        if state == "Z":
            raise RuntimeError(f"process {pid} exited before its stage")
        time.sleep(0.005)


def bare_fork_kb(python: str) -> int:
    """A bare `python -S`'s fork: the child stops at once; what it holds privately."""
    code = ("import os, signal, sys\npid = os.fork()\n"
            "if pid == 0:\n    os.kill(os.getpid(), signal.SIGSTOP)\n    os._exit(0)\n"
            "sys.stdout.write(f'{pid}\\n'); sys.stdout.flush(); sys.stdin.read()\n"
            "os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)\n")
    proc = subprocess.Popen([python, "-S", "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    pid = int(proc.stdout.readline())
    wait_stopped(pid)
    kb = private_dirty_kb(pid)
    proc.stdin.close()
    proc.wait()
    return kb


def measure(python: str, reps: int, warm: int, stages: list[str]) -> dict[str, list[int]]:
    from tests.starter_dirs import job_workdir, private_tree  # noqa: PLC0415

    out: dict[str, list[int]] = {"bare fork": [bare_fork_kb(python) for _ in range(reps)]}
    with private_tree("execd-floor") as tree, job_workdir("execd-floor-") as work:
        where = (str(tree.hierarchy.mount), str(tree.base.relative_to(tree.hierarchy.mount)),
                 work)
        warm_specs = [spec(where, f"warm{i}", "/bin/true", []) for i in range(warm)]
        proc = subprocess.Popen(
            [python, "-S", "-m", "bench.starter_stages", *warm_specs], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the warm-up jobs' starter events
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for rep in range(reps):
                for stage in stages:
                    name = f"{stage}-{rep}"
                    path = spec(where, name, "/bin/sleep", ["60"])
                    proc.stdin.write(f"{stage}\0{path}\0{work / name}.log\n".encode())
                    proc.stdin.flush()
                    pid = int(proc.stdout.readline())
                    wait_stopped(pid)
                    out.setdefault(stage, []).append(private_dirty_kb(pid))
                    os.kill(pid, signal.SIGKILL)
                    tree.job(name).kill()  # its job (private_tree removes the cgroups)
        finally:
            proc.stdin.close()
            proc.wait()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", action="append", help="interpreter (default: this one)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=0, help="warm-up jobs run in the zygote")
    ap.add_argument("--stages", default=",".join(STAGES), help="e.g. start,poll20,poll50")
    args = ap.parse_args()
    print(f"starter private dirty memory, kB (median of {args.reps}), "
          f"{args.warm} warm-up jobs in the zygote")
    stages = args.stages.split(",")
    print(f"{'python':24} " + " ".join(f"{s:>9}" for s in ["bare fork", *stages]))
    for python in args.python or [sys.executable]:
        version = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, check=True).stdout.strip()
        got = measure(python, args.reps, args.warm, stages)
        print(f"{version:24} " + " ".join(
            f"{statistics.median(got[s]):9.0f}" for s in ["bare fork", *stages]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
