"""Job throughput and restart time through a real daemon (root, a writable cgroup v2).

1. Throughput of `/bin/true` jobs through one partitionable slot with claim reuse:
   K clients, each holding one claim (a d-slot) and running job after job on it
   (activate, job_result wait+ack). Goal: 100 jobs/s on the 2-core machine. Also: a
   fresh claim per job (request_claim, activate, job_result, release), and a bare
   fork+exec of /bin/true measured in the same run, for the ratio.
2. Restart with 50 running jobs: `kill -9` the daemon, start a new one, time until it
   serves with every starter re-adopted; and the same for a restart in place (SIGUSR2).
   Goal: under 2 s.

Usage: .venv/bin/python bench/bench_jobs.py [--jobs 300] [--running 50] [--held 0]
--held N: N sleeping jobs hold d-slots of their own through the throughput runs (a busy
node: each launch has that many slots beside it).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import RunningDaemon

TRUE = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 32, "RequestDisk": 1024,
        "Iwd": "/tmp"}
SLEEP = {**TRUE, "Cmd": "/bin/sleep", "Args": ["600"]}


def socket_of(node: RunningDaemon) -> Path:
    return Path(node.execd("config-val", "RUN").stdout.strip()) / "execd.sock"


def reuse_loop(sock: Path, jobs: int, failures: list[Any]) -> None:
    with ControlClient(sock, timeout=60) as c:
        claim = c.call("request_claim", {"job": TRUE})["claim_id"]
        for _ in range(jobs):
            job = c.call("activate", {"claim_id": claim, "job": TRUE})
            out = c.call("job_result", {"job_id": job["job_id"], "wait": True, "ack": True})
            if (out["report"] or {}).get("ExitCode") != 0:
                failures.append(out)
        c.call("release", {"claim_id": claim})


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU of a process so far, and of its reaped children (the starters and their jobs)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = [int(v) for v in f.read().rsplit(")", 1)[1].split()[11:15]]
    tick = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1]) / tick, (fields[2] + fields[3]) / tick


def starters_cpu(daemon_pid: int) -> float:
    """CPU of the reaped starters and jobs: the daemon's children (cold starters) and
    the starter zygote's (forked starters), with the zygote's own."""
    total = cpu_seconds(daemon_pid)[1]
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or b"--zygote" not in (entry / "cmdline").read_bytes():
                continue
            with open(entry / "stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != daemon_pid:
                    continue
            own, children = cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue
        total += own + children
    return total


def throughput(sock: Path, clients: int, jobs: int) -> float:
    failures: list[Any] = []
    per = jobs // clients
    threads = [threading.Thread(target=reuse_loop, args=(sock, per, failures))
               for _ in range(clients)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise SystemExit(f"{len(failures)} jobs failed, e.g. {failures[0]}")
    return per * clients / elapsed


def fresh_claims(sock: Path, jobs: int) -> float:
    with ControlClient(sock, timeout=60) as c:
        began = time.perf_counter()
        for _ in range(jobs):
            claim = c.call("request_claim", {"job": TRUE})["claim_id"]
            job = c.call("activate", {"claim_id": claim, "job": TRUE})
            c.call("job_result", {"job_id": job["job_id"], "wait": True})
            c.call("release", {"claim_id": claim})
        return jobs / (time.perf_counter() - began)


def bare(jobs: int) -> float:
    began = time.perf_counter()
    for _ in range(jobs):
        subprocess.run(["/bin/true"], check=True)
    return jobs / (time.perf_counter() - began)


def serving(sock: Path, old_started: float | None, deadline: float = 60) -> dict[str, Any]:
    """Ping every 5 ms until a daemon other than `old_started` answers."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with ControlClient(sock, timeout=5) as c:
                ping: dict[str, Any] = c.call("ping")
            if ping["started"] != old_started:
                return ping
        except Exception:  # not up yet: try again
            pass
        time.sleep(0.005)
    raise SystemExit("the daemon did not come back")


def restart(node: RunningDaemon, running: int) -> None:
    sock = socket_of(node)
    with ControlClient(sock, timeout=60) as c:
        for _ in range(running):
            claim = c.call("request_claim", {"job": SLEEP})["claim_id"]
            c.call("activate", {"claim_id": claim, "job": SLEEP})
        before = c.call("ping")["started"]
    assert node.proc is not None
    node.proc.send_signal(signal.SIGKILL)
    node.proc.communicate(timeout=30)
    began = time.perf_counter()
    node.proc = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "run"],
        env=node.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    ping = serving(sock, before)
    wall = time.perf_counter() - began
    got = ping["recovered"]
    print(f"kill -9 + new daemon, {running} jobs running: serving with {got['adopted']} "
          f"re-adopted after {wall:.3f} s (goal < 2 s)")
    began = time.perf_counter()
    node.proc.send_signal(signal.SIGUSR2)
    ping = serving(sock, ping["started"])
    wall = time.perf_counter() - began
    print(f"restart in place (SIGUSR2), {running} jobs running: serving with "
          f"{ping['recovered']['adopted']} re-adopted after {wall:.3f} s (goal < 2 s)")
    with ControlClient(sock, timeout=60) as c:
        c.call("off", {"how": "fast"})
    node.proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--running", type=int, default=50)
    ap.add_argument("--held", type=int, default=0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="execd-bench-") as tmp:
        root = Path(tmp)
        root.chmod(0o755)
        node = RunningDaemon(root, f"NUM_CPUS = {max(8, args.running) + args.held}\n"
                            "MEMORY = 8192\n")  # fmt: skip
        node.start()
        try:
            sock = socket_of(node)
            throughput(sock, 1, 10)  # warm up
            with ControlClient(sock, timeout=60) as c:
                for _ in range(args.held):
                    claim = c.call("request_claim", {"job": SLEEP})["claim_id"]
                    c.call("activate", {"claim_id": claim, "job": SLEEP})
            rate_bare = bare(args.jobs)
            print(f"bare fork+exec of /bin/true: {rate_bare:.0f} /s")
            assert node.proc is not None
            for clients in (1, 2, 4, 8):
                own, children = cpu_seconds(node.proc.pid)[0], starters_cpu(node.proc.pid)
                rate = throughput(sock, clients, args.jobs)
                own_after = cpu_seconds(node.proc.pid)[0]
                children_after = starters_cpu(node.proc.pid)
                daemon_ms = (own_after - own) / args.jobs * 1000
                starter_ms = (children_after - children) / args.jobs * 1000
                print(f"/bin/true through one p-slot, {clients} reused claim(s): "
                      f"{rate:.1f} jobs/s (goal 100; bare/execd = {rate_bare / rate:.0f}x); "
                      f"CPU per job: daemon {daemon_ms:.1f} ms, starter+job {starter_ms:.1f} ms")
            print(f"/bin/true with a fresh claim per job: {fresh_claims(sock, args.jobs // 3):.1f}"
                  " jobs/s")
            restart(node, args.running)
        finally:
            node.stop(signal.SIGQUIT)


if __name__ == "__main__":
    main()
