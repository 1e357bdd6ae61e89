"""Jobs survive the daemon: kill -9 with 20 jobs running, then a new daemon re-adopts them.

Real daemon, real starters and jobs, real cgroups. Each job blocks reading its own FIFO
(no polling): the test decides when each one ends — some while no daemon runs — and
what it exits with, then checks every outcome through `job_result` as `execd job` reads
it, and that nothing is left behind: no process, no cgroup, no sandbox, no record.
"""

from __future__ import annotations

import os
import select
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from execd.cli.job import exit_status
from execd.daemon.client import ControlClient
from execd.daemon.control import ControlError
from tests.component.daemon_harness import REPO, RunningDaemon, running_daemon

JOBS = 20
ENDED_MEANWHILE = range(0, 8)  # released while no daemon runs
KILLED_BY_SIGNAL = (5, 15)  # these end by SIGKILL from within, not by exit


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with running_daemon(
        "NUM_CPUS = 24\nMEMORY = 4096\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n",
        prefix="execd-restart-",
    ) as daemon:
        yield daemon


def socket_path(node: RunningDaemon) -> Path:
    run = node.execd("config-val", "RUN").stdout.strip()
    return Path(run) / "execd.sock"


def fifo_job(fifos: Path, index: int) -> dict[str, Any]:
    """A job that waits for one line on its FIFO, then exits with it (or kills itself)."""
    fifo = fifos / f"job{index}"
    os.mkfifo(fifo, 0o666)
    os.chmod(fifo, 0o666)
    end = "kill -KILL $$" if index in KILLED_BY_SIGNAL else 'exit "$code"'
    script = f'read code < {fifo}; {end}'
    return {"Cmd": "/bin/sh", "Args": ["-c", script], "RequestCpus": 1, "RequestMemory": 64,
            "RequestDisk": 1024, "JobUniverse": 5, "Iwd": "/tmp"}


def release_job(fifos: Path, index: int) -> None:
    # Opening a FIFO for writing waits for its reader: the job is surely listening.
    with open(fifos / f"job{index}", "w") as f:
        f.write(f"{index}\n")


def expected(index: int) -> int:
    return 128 + signal.SIGKILL if index in KILLED_BY_SIGNAL else index


def await_exit(pids: list[int], timeout: float = 30) -> None:
    """Block until every process in `pids` has exited (pidfds: no polling)."""
    fds = []
    for pid in pids:
        try:
            fds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue
    try:
        for fd in fds:
            ready, _, _ = select.select([fd], [], [], timeout)
            assert ready, f"a starter did not exit within {timeout}s"
    finally:
        for fd in fds:
            os.close(fd)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def last_event(node: RunningDaemon, name: str) -> dict[str, Any]:
    found = [e for e in node.events() if e.get("event") == name]
    assert found, f"no {name} event"
    return found[-1]


def cgroup_children(node: RunningDaemon) -> list[str]:
    base = node.cgroup_base
    return sorted(p.name for p in base.iterdir() if p.is_dir())


def store_rows(node: RunningDaemon, table: str) -> int:
    db = sqlite3.connect(node.root / "state" / "spool" / "state.db")
    try:
        (count,) = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()
    finally:
        db.close()
    return int(count)


def start_jobs(node: RunningDaemon, fifos: Path) -> list[dict[str, Any]]:
    started = []
    with ControlClient(socket_path(node), timeout=60) as c:
        for index in range(JOBS):
            ad = fifo_job(fifos, index)
            claim = c.call("request_claim", {"job": ad})
            job = c.call("activate", {"claim_id": claim["claim_id"], "job": ad})
            started.append({**claim, **job, "index": index})
        who = {j["job_id"]: j["starter_pid"] for j in c.call("who")["jobs"]}
    for job in started:
        job["starter_pid"] = who[job["job_id"]]
    return started


@pytest.fixture
def fifos() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="execd-fifos-") as tmp:
        Path(tmp).chmod(0o755)
        yield Path(tmp)


def test_kill_9_with_20_jobs_running_loses_no_outcome_and_leaks_nothing(
        node: RunningDaemon, fifos: Path) -> None:
    jobs = start_jobs(node, fifos)
    assert node.proc is not None
    # and one through `execd job`, which must wait through the outage for its exit code
    cli_fifo = fifos / "cli"
    os.mkfifo(cli_fifo, 0o666)
    cli_fifo.chmod(0o666)
    cli = subprocess.Popen(
        [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--",
         "sh", "-c", f"read code < {cli_fifo}; exit $code"],
        env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    node.wait_for("starter_spawned", slot=f"slot1_{JOBS + 1}")
    # An orphan the new daemon must clean up: a job cgroup with a process and no starter,
    # and a sandbox with no job.
    orphan = node.cgroup_base / "slot7_77.slice"
    (orphan / "job").mkdir(parents=True)
    sandbox = node.root / "state" / "execute" / "dir_999999"
    sandbox.mkdir()
    deepest = str(sandbox)  # 1100 levels: shutil.rmtree recursed and the restart failed
    for _ in range(1100):
        deepest += "/d"
        os.mkdir(deepest)
    # and a starter the old daemon launched but never recorded (it died in between)
    unrecorded = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "-m", "execd.starter"])
    daemon_leaf = node.cgroup_base / "daemon" / "cgroup.procs"
    daemon_leaf.write_text(str(unrecorded.pid))

    node.proc.send_signal(signal.SIGKILL)
    node.proc.communicate(timeout=30)  # closes its pipes too
    stray = os.fork()
    if stray == 0:  # the stray process in the orphan cgroup
        (orphan / "job" / "cgroup.procs").write_text(str(os.getpid()))
        os.execv("/bin/sleep", ["sleep", "300"])
    for index in ENDED_MEANWHILE:
        release_job(fifos, index)
    await_exit([jobs[i]["starter_pid"] for i in ENDED_MEANWHILE])
    still_running = [j for j in jobs if j["index"] not in ENDED_MEANWHILE]
    assert all(alive(j["starter_pid"]) for j in still_running)

    node.start()  # returns once the new daemon serves: recovery is done by then
    recovered = last_event(node, "recovery_done")
    assert recovered["claims"] == JOBS + 1
    assert recovered["adopted"] == JOBS + 1 - len(ENDED_MEANWHILE)
    assert recovered["ended_meanwhile"] == len(ENDED_MEANWHILE)
    assert last_event(node, "orphan_cgroup_removed")["cgroup"] == str(orphan)
    assert last_event(node, "orphan_sandbox_removed")["sandbox"] == str(sandbox)
    assert last_event(node, "orphan_starter_killed")["starter_pid"] == unrecorded.pid
    assert unrecorded.wait(timeout=30) == -signal.SIGKILL
    assert os.waitpid(stray, 0)[1] != 0  # killed with its cgroup
    assert not sandbox.exists()

    with ControlClient(socket_path(node), timeout=60) as c:
        who = {j["job_id"]: j["starter_pid"] for j in c.call("who")["jobs"]}
        assert {j: who[j] for j in who if j in {r["job_id"] for r in still_running}} == {
            j["job_id"]: j["starter_pid"] for j in still_running}
        assert len(who) == len(still_running) + 1  # and the `execd job` one
        status = node.execd("status", "-af", "Name", "State", "Activity").stdout.split("\n")
        busy = [line for line in status if "Claimed Busy" in line]
        assert len(busy) == len(still_running) + 1
        with open(cli_fifo, "w") as f:
            f.write("42\n")
        _out, err = cli.communicate(timeout=120)
        assert cli.returncode == 42, err
        assert "execd went away" in err
        for job in still_running:
            release_job(fifos, job["index"])
        for job in jobs:
            outcome = c.call("job_result", {"job_id": job["job_id"], "wait": True})
            assert outcome["done"]
            assert exit_status(outcome) == expected(job["index"]), (job, outcome)
        for job in jobs:
            c.call("release", {"claim_id": job["claim_id"]})
        # a released claim's id is stale: refused, and nothing changes
        try:
            c.call("activate", {"claim_id": jobs[0]["claim_id"], "job": {}})
            raise AssertionError("a released claim id was accepted")
        except ControlError as exc:
            assert exc.code == "refused"
    for _ in range(JOBS + 1):
        node.wait_for("dynamic_slot_deleted")
    assert not any(alive(j["starter_pid"]) for j in jobs)
    assert cgroup_children(node) == ["daemon"]
    assert not [p for p in (node.root / "state" / "execute").iterdir()]
    assert not list((node.root / "state" / "spool" / "jobs").iterdir())
    assert store_rows(node, "jobs") == 0
    assert store_rows(node, "claims") == 0
    log_text = node.log.read_text()
    assert not [j for j in jobs if j["claim_id"][-64:] in log_text]  # secrets never logged


def test_drain_state_survives_kill_9_and_its_cancel_does_too(node: RunningDaemon) -> None:
    assert node.execd("drain", "-graceful", "-reason", "kernel update").returncode == 0
    node.wait_for("slot_state_changed", new="Drained/Idle")

    def kill_and_restart() -> list[str]:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)
        node.proc.communicate(timeout=30)
        node.start()
        return node.execd("status", "-af", "State", "DrainReason").stdout.split("\n")[:1]

    assert kill_and_restart() == ["Drained kernel update"]
    assert last_event(node, "drain_restored")["reason"] == "kernel update"
    assert node.execd("drain", "-cancel").returncode == 0
    assert kill_and_restart()[0].split()[0] in ("Owner", "Unclaimed")


def test_a_claim_lease_that_ran_out_while_no_daemon_ran_kills_the_job_at_restart(
        node: RunningDaemon, fifos: Path) -> None:
    """The lease runs from the last ALIVE the old daemon recorded, not from the restart:
    a claim whose JobLeaseDuration passed during the outage is not given a new one; the
    new daemon expires it at once and kills its job."""
    assert node.proc is not None
    ad = {**fifo_job(fifos, 0), "JobLeaseDuration": 3}
    with ControlClient(socket_path(node)) as c:
        claim = c.call("request_claim", {"job": ad})
        job = c.call("activate", {"claim_id": claim["claim_id"], "job": ad})
        c.call("alive", {"claim_id": claim["claim_id"]})
    renewed = time.time()
    node.proc.send_signal(signal.SIGKILL)
    node.proc.communicate(timeout=30)
    # the lease itself is what must pass: no event marks it while no daemon runs
    time.sleep(max(0.0, renewed + 3.5 - time.time()))
    node.start()
    restored = last_event(node, "claim_restored")
    assert (restored["slot"], restored["lease_left_s"]) == (claim["slot"], 0)
    node.wait_for("claim_lease_expired", slot=claim["slot"])
    finished = node.wait_for("job_finished", job=job["job_id"])
    assert finished["reason"] == "hard_killed"
