"""condor_startd against execd, side by side in one real pool, on the same short jobs.

One pool (the pool tier's chroot, tests/pool/pool_harness.py), one schedd, one submitter
(`execdtest`): first HTCondor's own condor_startd is the pool's execute point, then it
is turned off (`condor_off -startd`) and `execd run` joins the same pool (--execd-first:
the other way round, `condor_on -startd` after execd has left). Each EP has
the same slot layout, one partitionable slot of --cpus CPUs and --memory MB
(`use FEATURE : PartitionableSlot`, `use POLICY : Always_Run_Jobs`), and each runs the
same cluster of --jobs vanilla jobs: a few lines of shell that read a small per-job
input file (transferred in), sleep --sleep seconds, write a result file (transferred
out, remapped to results/N.txt), print to stdout and exit with code N % 4.

Measured, per EP:
- wall time from condor_submit to the last job's termination event in the user log,
  and jobs/min;
- EP memory: the summed PSS of the EP daemon and its starters (condor_startd +
  condor_starter processes; execd + its starter zygote and starters), sampled every
  --every seconds (bench/ep_memory.py). Idle: the median before submitting. Per job:
  (peak EP PSS - idle EP PSS) / peak number of running jobs.
Results must be identical: every job's exit code, stdout, stderr and result file are
compared between the two EPs; any difference fails the run (exit status 1), as does a
job that is held or a run that stops making progress (--stall seconds without a job
finishing, or --timeout in all): it says how far it got and why, and never hangs.

Goals (issue 10): execd's per-job EP memory under half of condor_startd's; execd's
throughput at least condor_startd's.

Usage (root; the pool tier's chroot built by `python tests/tiers.py setup`):
    EXECD_POOL_ROOT=/var/cache/execd-tests/pool-NAME .venv/bin/python bench/bench_pool.py \
        [--jobs 200] [--cpus 4] [--sleep 1] [--only condor|execd] [--json PATH]
    ... bench/bench_pool.py --check      # 4 jobs, no sleep: do both EPs agree?
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pool"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pool_harness as harness
from ep_memory import ExecutePoint, Sampler, comm_of, idle_pss_kb
from pool_results import Half, report
from user_log import job_outcomes, read_events

from tests.component.daemon_harness import RunningDaemon

REPO = Path(__file__).resolve().parents[1]

JOB_SCRIPT = """#!/bin/sh
# bench_pool job N: read the transferred input, write a result, exit N % 4
n=$1
sleep "$2"
{ echo "job $n"; wc -l < "in_$n.txt"; tr a-z A-Z < "in_$n.txt"; } > result.txt
echo "stdout of job $n"
exit $((n % 4))
"""
SUBMIT = """\
executable = job.sh
arguments = $(Process) {sleep}
transfer_input_files = in/in_$(Process).txt
transfer_output_files = result.txt
transfer_output_remaps = "result.txt = results/$(Process).txt"
output = out/$(Process).out
error = err/$(Process).err
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_cpus = 1
request_memory = 32
request_disk = 1024
queue {jobs}
"""


class BenchPool(harness.Pool):
    """The pool tier's pool, its condor_startd with the slot layout execd gets too."""

    def __init__(self, layout: str, *, with_startd: bool) -> None:
        super().__init__(with_startd=with_startd)
        self.layout = layout

    def config_text(self) -> str:
        return super().config_text() + "# bench_pool: the EP's slot layout\n" + self.layout


class StalledError(RuntimeError):
    """The jobs stopped finishing (or one was held): the message says how far they got."""


def prepare_jobs(pool: harness.Pool, name: str, jobs: int, sleep: float) -> str:
    """The submitter's job directory (chroot path) with job.sh, inputs and job.sub."""
    chroot_dir = f"/home/{harness.SUBMITTER}/job-bench-{name}"
    host = pool.host_path(chroot_dir)
    home = host.parent.stat()
    for sub in ("", "in", "out", "err", "results"):
        (host / sub).mkdir(parents=True, exist_ok=True)
    (host / "job.sh").write_text(JOB_SCRIPT)
    (host / "job.sh").chmod(0o755)
    (host / "job.sub").write_text(SUBMIT.format(sleep=sleep, jobs=jobs))
    for n in range(jobs):
        lines = "".join(f"line {i} of the input of job {n}\n" for i in range(1 + n % 7))
        (host / "in" / f"in_{n}.txt").write_text(lines)
    for path in [host, *host.rglob("*")]:
        os.chown(path, home.st_uid, home.st_gid)
    return chroot_dir


def run_cluster(pool: harness.Pool, half: Half, ep: ExecutePoint,
                args: argparse.Namespace, diagnose: Callable[[], str]) -> None:  # fmt: skip
    """Submit the cluster, sample the EP until every job has terminated, record it.

    StalledError when the jobs stop finishing; what was sampled until then is kept."""
    chroot_dir = prepare_jobs(pool, half.ep, half.jobs, args.sleep)
    host = pool.host_path(chroot_dir)
    half.idle_pss_kb = idle_pss_kb(ep, args.idle, args.every)
    sampler = Sampler(ep, args.every).start()
    t0 = time.monotonic()
    cluster = None
    try:
        submitted = pool.tool("condor_submit", "-terse", "job.sub", user=harness.SUBMITTER,
                              cwd=chroot_dir).check()  # fmt: skip
        cluster = int(submitted.stdout.split()[0].split(".")[0])
        try:
            wait_for_cluster(half, host / "job.log", cluster, t0, args)
        except StalledError as exc:
            codes = Counter(e.code for e in read_events(host / "job.log", cluster))
            events = ", ".join(f"{code} x{n}" for code, n in sorted(codes.items()))
            raise StalledError(f"{exc}\nuser log events: {events}\n"
                               f"{queue_summary(pool, cluster)}{diagnose()}") from None
        half.wall_s = round(time.monotonic() - t0, 3)
        half.jobs_per_min = round(half.jobs / half.wall_s * 60, 1)
    finally:
        half.samples = sampler.stop()
        if cluster is not None and half.completed < half.jobs:
            pool.tool("condor_rm", str(cluster), user=harness.SUBMITTER)
        half.peak_pss_kb = max(s.pss_kb for s in half.samples)
        half.peak_jobs = max(s.jobs for s in half.samples)
        if half.peak_jobs:
            half.per_job_kb = round((half.peak_pss_kb - half.idle_pss_kb) / half.peak_jobs, 1)
        half.idle_after_pss_kb = idle_pss_kb(ep, args.idle, args.every)
        half.outcomes = job_outcomes(host, half.jobs, read_events(host / "job.log", cluster))


def wait_for_cluster(half: Half, log: Path, cluster: int, t0: float,
                     args: argparse.Namespace) -> None:  # fmt: skip
    """Until the user log has every job's termination; StalledError when it stops moving."""
    last_progress = time.monotonic()
    while True:
        events = read_events(log, cluster)
        done = sum(1 for e in events if e.code == "005")
        if done > half.completed:
            half.completed, last_progress = done, time.monotonic()
        if done == half.jobs:
            return
        ended = [e for e in events if e.code in ("009", "012")]
        now = time.monotonic()
        why = ""
        if ended:
            how = "held" if ended[0].code == "012" else "removed"
            why = f"job {cluster}.{ended[0].proc} was {how}"
        elif now - last_progress > args.stall:
            why = f"no job finished for {args.stall:.0f} s"
        elif now - t0 > args.timeout:
            why = f"the run took over {args.timeout:.0f} s"
        if why:
            raise StalledError(f"{half.ep}: {why}; {done} of {half.jobs} jobs finished "
                               f"after {now - t0:.0f} s")  # fmt: skip
        time.sleep(0.1)  # the user log is a file: polled


def queue_summary(pool: harness.Pool, cluster: int) -> str:
    """The cluster's jobs by state, a hold reason, and why none matched if none ran."""
    names = {"1": "idle", "2": "running", "3": "removed", "4": "completed", "5": "held"}
    out = pool.tool("condor_q", "-allusers", str(cluster), "-af", "JobStatus", "HoldReason")
    lines = [line for line in out.stdout.splitlines() if line]
    states = Counter(names.get(line.split()[0], line) for line in lines)
    text = f"condor_q: {dict(states) or 'no job left in the queue'}\n"
    held = [line.split(None, 1)[1] for line in lines if line.startswith("5 ")]
    if held:
        text += f"hold reason: {held[0]}\n"
    if states and set(states) == {"idle"}:
        analysis = pool.tool("condor_q", "-better-analyze", f"{cluster}.0").stdout
        # the reduced conditions' table: "[9]   0  TARGET.HasFileTransfer" matched no slot
        unmet = re.findall(r"^\[\d+\]\s+0\s+(.+)$", analysis, re.MULTILINE)
        text += (f"no slot matches the jobs' requirements on: {', '.join(unmet)}\n" if unmet
                 else "the jobs match the EP's slot but do not run (the EP's log below)\n")
    return text


# ----- the two execute points -------------------------------------------------------
def run_condor_startd(pool: harness.Pool, args: argparse.Namespace) -> Half:
    half = Half("condor_startd", args.jobs)
    (startd,) = [p for p in pool.chroot_pids() if comm_of(p) == "condor_startd"]

    def diagnose() -> str:
        return "StartLog (end):\n" + "".join(pool.daemon_log("StartLog").splitlines(True)[-15:])

    try:
        names = frozenset({"condor_startd", "condor_starter"})
        ep = ExecutePoint(startd, names, pool.local_dir / "execute")
        run_cluster(pool, half, ep, args, diagnose)
    except StalledError as exc:
        half.error = str(exc)
    return half


def condor_off_startd(pool: harness.Pool) -> None:
    pool.tool("condor_off", "-startd").check()
    harness.wait_for("condor_startd to stop and its slots to leave the collector",
                     lambda: not pool.status("-slots") and not [
                         p for p in pool.chroot_pids() if comm_of_or_none(p) == "condor_startd"],
                     60, 0.2)  # fmt: skip


def comm_of_or_none(pid: int) -> str | None:
    try:
        return comm_of(pid)
    except OSError:
        return None


def run_execd(pool: harness.Pool, layout: str, args: argparse.Namespace) -> Half:
    half = Half("execd", args.jobs)
    domains = "".join(
        f"{knob} = {pool.tool('condor_config_val', knob).check().stdout.strip()}\n"
        for knob in ("UID_DOMAIN", "FILESYSTEM_DOMAIN"))  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-pool-execd-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # jobs run as another user below it
        node = RunningDaemon(root, f"COLLECTOR_HOST = {pool.collector}\n{domains}"
                                   "EXECD_COMMAND_ADDRESS = 127.0.0.1:0\n" + layout)  # fmt: skip
        node.start()
        try:
            node.wait_for("pool_joined")
            harness.wait_for("execd's slot in condor_status", lambda: pool.status("-slots"),
                             harness.START_TIMEOUT_S, 0.2)  # fmt: skip
            assert node.proc is not None

            def diagnose() -> str:
                counts = Counter(e.get("event") for e in node.events())
                notable = {k: v for k, v in counts.items() if k and ("shadow" in k or
                           "fail" in k or "error" in k or "refused" in k)}  # fmt: skip
                tail = [e.get("event") for e in node.events()[-8:]]
                return f"ExecdLog: notable events {notable}; last events {tail}\n"

            try:
                # the zygote and the starters are the daemon's Python, forked
                names = frozenset({comm_of(node.proc.pid)})
                execute = Path(node.execd("config-val", "EXECUTE").stdout.strip())
                run_cluster(pool, half, ExecutePoint(node.proc.pid, names, execute), args,
                            diagnose)  # fmt: skip
            except StalledError as exc:
                half.error = str(exc)
        finally:
            node.stop(signal.SIGQUIT)
    return half


def run_both(layout: str, args: argparse.Namespace) -> list[Half]:
    """The halves asked for, in the order asked for, in one pool."""
    halves = []
    with BenchPool(layout, with_startd=args.only != "execd") as pool:
        if args.only is None and args.execd_first:
            condor_off_startd(pool)
            halves.append(run_execd(pool, layout, args))
            pool.tool("condor_on", "-startd").check()
            harness.wait_for("condor_startd's slot ad", lambda: pool.status("-slots"),
                             harness.START_TIMEOUT_S, 0.2)  # fmt: skip
            halves.append(run_condor_startd(pool, args))
            return halves
        if args.only != "execd":
            halves.append(run_condor_startd(pool, args))
            if args.only is None:
                condor_off_startd(pool)
        if args.only != "condor":
            halves.append(run_execd(pool, layout, args))
    return halves


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = ap.add_argument
    add("--jobs", type=int, help="jobs in the cluster (200; 4 with --check)")
    add("--cpus", type=int, default=4, help="CPUs of the one partitionable slot")
    add("--memory", type=int, default=2048, help="MB of the partitionable slot")
    add("--sleep", type=float, help="seconds each job sleeps (1; 0 with --check)")
    add("--every", type=float, default=0.2, help="seconds between EP memory samples")
    add("--idle", type=float, default=3.0, help="seconds of idle EP sampling")
    add("--stall", type=float, help="fail after this long without a job finishing "
                                    "(120 s; 45 s with --check)")  # fmt: skip
    add("--timeout", type=float, default=1800, help="fail after this long in all")
    add("--only", choices=("condor", "execd"), help="run one EP only")
    add("--check", action="store_true", help="a few jobs: do both EPs agree?")
    add("--execd-first", action="store_true", help="run execd's half first (order bias)")
    add("--json", type=Path, help="where to write the results "
                                  "(default bench/results/pool-TIME.json)")  # fmt: skip
    args = ap.parse_args()
    args.jobs = args.jobs or (4 if args.check else 200)
    args.sleep = args.sleep if args.sleep is not None else (0 if args.check else 1)
    args.stall = args.stall or (45 if args.check else 120)
    if args.check:
        args.idle = min(args.idle, 1.0)
    layout = (f"NUM_CPUS = {args.cpus}\nMEMORY = {args.memory}\n"
              "use FEATURE : PartitionableSlot\nuse POLICY : Always_Run_Jobs\n")  # fmt: skip

    try:
        halves = run_both(layout, args)
    except harness.PoolError as exc:
        print(f"bench_pool: the pool did not come up or stop as asked: {exc}", file=sys.stderr)
        return 2
    result = report(halves, args)
    path = args.json or REPO / "bench" / "results" / time.strftime("pool-%Y%m%dT%H%M%SZ.json",
                                                                    time.gmtime())  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"results: {path}")
    failed = any(h.error for h in halves) or result.get("identical") is False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
