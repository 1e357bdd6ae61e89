"""Jobs submitted with condor_submit run to completion on `execd run`: the real schedd
claims execd's slot, the real shadow activates it, and the daemon serves the shadow
(execd/wire/shadow.py) with the job run by execd's own starter (its cgroup, never
root, the starter's durable report). Each outcome is compared with the same job on the
pool's own condor_startd: user-log events, termination lines, output files, holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TypeVar

import pool_harness as harness
import pytest
import user_log_view
from test_pool_claims import claim_command
from test_pool_daemon import WAIT_S, PoolNode, start_node
from test_shadow_pool import CASES, outcome, run_on_condor_startd

from execd.cgroups.discovery import discover
from execd.cgroups.fs import CgroupFS
from execd.wire.commands import Command

JOB_SCRIPT = """#!/bin/sh
cat in.txt
cat data/sub.txt > result.txt
id -u > uid.txt
cat /proc/self/cgroup > cgroup.txt
echo oops >&2
"""
JOB_SUBMIT = """\
executable = job.sh
transfer_input_files = in.txt, data
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = 64
queue
"""
NOBODY = 65534
T = TypeVar("T")


def pool_node(pool: harness.Pool, tmp: str, extra: str = "") -> PoolNode:
    return start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + extra)


def on_both(running_pool: harness.RunningPool, run: Callable[[harness.Pool], T],
               extra: str = "",
               reference: Callable[[harness.Pool], AbstractContextManager[object]] =
               lambda _pool: contextlib.nullcontext()) -> tuple[T, T]:  # fmt: skip
    """`run(pool)` with `execd run` (configured with `extra`) as the pool's execute
    point, then with the pool's own condor_startd (inside `reference(pool)`, e.g. a
    config of its own): (execd's result, condor_startd's)."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, extra)
        try:
            ours = run(pool)
        finally:
            node.stop(signal.SIGQUIT)
    condor = running_pool.get(with_startd=True)
    with reference(condor):
        return ours, run(condor)


@pytest.fixture
def node(pool: harness.Pool) -> Iterator[PoolNode]:
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        started = pool_node(pool, tmp)
        try:
            yield started
        finally:
            started.stop(signal.SIGQUIT)
            harness.wait_for("execd's slots gone", lambda: not pool.status("-slots"), 30, 0.2)


def execute_dir(node: PoolNode) -> Path:
    return node.root / "state" / "execute"


def test_job_runs_through_execds_starter_in_its_cgroup(pool: harness.Pool,
                                                       node: PoolNode) -> None:
    files = {"job.sh": JOB_SCRIPT, "in.txt": "input one\n", "data/sub.txt": "from data\n"}
    job = submit_files(pool, JOB_SUBMIT, files)
    log = job.wait_for_event("005", WAIT_S)
    assert "Normal termination (return value 0)" in log
    assert job.output("out.txt") == "input one\n"  # stdout, with the transferred input
    assert job.output("err.txt") == "oops\n"
    assert job.output("result.txt") == "from data\n"  # from the transferred directory
    assert job.output("uid.txt") == f"{NOBODY}\n"  # never root
    # the job ran in its slot's job cgroup under execd's base cgroup
    assert job.output("cgroup.txt").strip().endswith(f"/{node.base_cgroup}/slot1_1.slice/job")
    spawned = node.wait_for("starter_spawned", slot="slot1_1")
    finished = node.wait_for("job_finished", slot="slot1_1", reason="exited")
    assert finished["job"] == spawned["job"]
    # the sandbox went once the output was transferred
    harness.wait_for("the sandbox removed", lambda: not list(execute_dir(node).iterdir()),
                     WAIT_S, 0.2)  # fmt: skip


def timeless(events: list[str], until: str | None = None) -> list[str]:
    """The events up to `until`, without image-size updates (006): whether a short
    job's memory is measured before an update goes out is a race on condor_startd too."""
    if until is not None and until in events:
        events = events[:events.index(until) + 1]
    return [e for e in events if e != "006"]


def submit_files(pool: harness.Pool, text: str, files: dict[str, str],
                 user: str = harness.SUBMITTER,
                 modes: dict[str, int] | None = None) -> harness.SubmittedJob:  # fmt: skip
    """Pool.submit with subdirectories and an executable script (`modes`: a file's
    own mode, else 0755 for *.sh, 0644 for the rest)."""
    pool._jobs += 1
    pool.add_user(user)
    job_dir = pool.host_path(f"/home/{user}/job{pool._jobs}")
    if job_dir.exists():  # an earlier session's (only the submitter's are wiped at start)
        subprocess.run(["rm", "-rf", "--one-file-system", str(job_dir)], check=True)
    job_dir.mkdir(parents=True)
    uid, gid = pool._chroot_ids(user)
    for name, body in {"job.sub": text, **files}.items():
        path = job_dir / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(body)
        path.chmod((modes or {}).get(name, 0o755 if name.endswith(".sh") else 0o644))
    for path in [job_dir, *job_dir.rglob("*")]:
        os.chown(path, uid, gid)
    out = pool.tool("condor_submit", "-terse", "job.sub", user=user,
                    cwd=f"/home/{user}/job{pool._jobs}")  # fmt: skip
    return harness.SubmittedJob(pool, int(out.check().stdout.split()[0].split(".")[0]), job_dir)


def run_on_execd_run(pool: harness.Pool, args: str, *, unreadable: str = "",
                     until: str = "005", shebang: str = "") -> harness.SubmittedJob:  # fmt: skip
    """test_shadow_pool's job, on the `execd run` node beside the pool: the same
    submit-wait-record steps as its condor_startd run (they do not depend on the EP)."""
    return run_on_condor_startd(pool, args, unreadable=unreadable, until=until,
                                shebang=shebang, wait_s=WAIT_S)  # fmt: skip


SlotView = tuple[list[list[str]], list[tuple[str, list[tuple[str, str, str, str]]]]]


def slot_view(job: harness.SubmittedJob, until: str) -> SlotView:
    """What the user log says of the slot the job ran in (user_log_view.py): the
    execute event's resource lines, the resource tables of 004/005, up to `until`."""
    log = job.user_log()
    end = log.find(f"\n{until} (")
    log = log if end < 0 else log[:log.find("...\n", end) + 4]
    return user_log_view.execute_resources(log), user_log_view.resource_tables(log)


def test_same_user_log_on_execd_run_as_condor_startd(running_pool: harness.RunningPool) -> None:
    """Echo to output files, input files and a directory, exit 3, death by signal 9, an
    unreadable input (held 13), a missing interpreter (held 6): the same user-log
    events, termination lines, output files and hold reasons as condor_startd's, and
    the same slot resources in the execute event (001: Cpus, Disk, GPUs, Memory) and in
    the termination's resource table (Request, Allocated)."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            jobs = [run_on_execd_run(pool, a, unreadable=u, until=e, shebang=b)
                    for a, u, e, b in CASES]  # fmt: skip
            # before the pool restarts (it wipes the submitter's job directories)
            ours = [(outcome(job), slot_view(job, case[2]))
                    for job, case in zip(jobs, CASES, strict=True)]
            ran = [e for e in node.events() if e["event"] == "starter_spawned"]
            assert len(ran) >= 3  # the jobs that ran, ran through execd's starter
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    theirs = []
    for a, u, e, b in CASES:
        job = run_on_condor_startd(reference, a, unreadable=u, until=e, shebang=b)
        theirs.append((outcome(job), slot_view(job, e)))
    for case, (mine, my_slot), (real, real_slot) in zip(CASES, ours, theirs, strict=True):
        until = case[2]  # what came after it (condor_rm's 009 of a held job) may be late
        assert (timeless(mine[0], until), *mine[1:-1]) == \
            (timeless(real[0], until), *real[1:-1]), (case, mine, real)
        assert my_slot == real_slot, (case, my_slot, real_slot)
    # the jobs that ran: the dynamic slot's resources, request_memory 64 rounded up
    assert ["Memory = 128" in lines for lines in ours[2][1][0]] == [True], ours[2]


SLEEP_SCRIPT = "#!/bin/sh\necho started\nexec sleep 300\n"
VACATE_SCRIPT = """#!/bin/sh
# The first run leaves a mark and waits to be vacated; the run after it finishes.
mark=/tmp/execd-vacate-$1
if [ -e "$mark" ]; then echo second run; rm -f "$mark"; exit 0; fi
echo first run
touch "$mark"
exec sleep 300
"""
PLAIN_SUBMIT = """\
executable = job.sh
arguments = {args}
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = 64
{extra}
queue
"""


def job_cgroup(node: PoolNode, slot: str = "slot1_1") -> Path:
    return discover(CgroupFS()).mount / node.base_cgroup / f"{slot}.slice"


def job_pids(node: PoolNode, slot: str = "slot1_1") -> list[int]:
    try:
        text = (job_cgroup(node, slot) / "job" / "cgroup.procs").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for {pid}")


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def running_in_cgroup(node: PoolNode, slot: str = "slot1_1") -> list[int]:
    """The job's `sleep` (exec'd by its script), in its execd job cgroup, as nobody."""
    pids: list[int] = harness.wait_for(
        "the job's sleep in its cgroup",
        lambda: (found := job_pids(node, slot)) and all(comm(p) == "sleep" for p in found)
        and found, WAIT_S, 0.1)  # fmt: skip
    assert all(uid_of(pid) == NOBODY for pid in pids), pids
    return pids


def assert_gone(node: PoolNode, pids: list[int]) -> None:
    """The job's cgroup and processes are gone and its d-slot is freed."""
    harness.wait_for("the job cgroup removed", lambda: not job_cgroup(node).exists(),
                     WAIT_S, 0.1)  # fmt: skip
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    node.wait_for("dynamic_slot_deleted", slot="slot1_1", timeout=WAIT_S)


def removed_while_running(pool: harness.Pool, node: PoolNode | None) -> list[str]:
    """condor_rm of a running job; the user log's events."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""), {"job.sh": SLEEP_SCRIPT})
    job.wait_for_event("001", WAIT_S)
    pids = running_in_cgroup(node) if node is not None else []
    pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
    job.wait_for_event("009", WAIT_S)
    if node is not None:
        finished = node.wait_for("job_finished", slot="slot1_1", timeout=WAIT_S)
        assert finished["reason"] in ("hard_killed", "soft_killed"), finished
        assert_gone(node, pids)
    return timeless(job.events())


def vacated_and_rerun(pool: harness.Pool, node: PoolNode | None) -> tuple[list[str], str]:
    """condor_vacate_job of a running job: evicted (004), requeued, run again to the end."""
    token = f"{os.getpid()}-{pool._jobs}"
    mark = Path(f"/tmp/execd-vacate-{token}")
    job = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra=""),
                       {"job.sh": VACATE_SCRIPT})  # fmt: skip
    try:
        job.wait_for_event("001", WAIT_S)
        if node is not None:
            running_in_cgroup(node)
        harness.wait_for("the first run's mark", mark.exists, WAIT_S, 0.1)
        pool.tool("condor_vacate_job", str(job.cluster), user=harness.SUBMITTER).check()
        job.wait_for_event("004", WAIT_S)
        if node is not None:
            evicted = node.wait_for("job_finished", slot="slot1_1", timeout=WAIT_S)
            assert evicted["reason"] == "soft_killed", evicted
        job.wait_for_event("005", 2 * WAIT_S)
    finally:
        mark.unlink(missing_ok=True)
    return timeless(job.events()), job.output("out.txt")


def test_rm_and_vacate_as_on_condor_startd(running_pool: harness.RunningPool) -> None:
    """condor_rm of a running job: removed (009), its cgroup and processes gone, the
    slot freed; condor_vacate_job: evicted (004), requeued, run again to the end — with
    the user-log events condor_startd gives the same jobs."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            ours = (removed_while_running(pool, node), vacated_and_rerun(pool, node))
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    theirs = (removed_while_running(reference, None), vacated_and_rerun(reference, None))
    assert ours == theirs
    assert ours[1][1] == "second run\n"


def schedd_pid(pool: harness.Pool) -> int:
    for pid in pool.chroot_pids():
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "condor_schedd":
                return pid
        except OSError:
            continue
    raise AssertionError("no condor_schedd in the pool")


def test_claim_lease_expiry_kills_the_job_and_frees_the_slot(pool: harness.Pool,
                                                             node: PoolNode) -> None:
    """No ALIVE answered (the schedd is stopped): the claim's lease (the job's
    JobLeaseDuration) expires, the job is killed and the slot freed."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra="job_lease_duration = 12"),
                       {"job.sh": SLEEP_SCRIPT})  # fmt: skip
    job.wait_for_event("001", WAIT_S)
    pids = running_in_cgroup(node)
    schedd = schedd_pid(pool)
    os.kill(schedd, signal.SIGSTOP)
    try:
        node.wait_for("claim_lease_expired", slot="slot1_1", timeout=WAIT_S)
        finished = node.wait_for("job_finished", slot="slot1_1", timeout=WAIT_S)
        assert finished["reason"] in ("hard_killed", "soft_killed"), finished
        assert_gone(node, pids)
        # the ALIVE that went unanswered (it times out after the 12 s lease has expired)
        harness.wait_for("the unanswered ALIVE logged", lambda: [
            e for e in node.events() if e["event"] == "alive_failed"], WAIT_S, 0.2)
    finally:
        os.kill(schedd, signal.SIGCONT)
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def held_claim_id(node: PoolNode, slot: str) -> str:
    """The claim id the schedd holds for `slot`, from execd's own store (root reads it)."""
    db = sqlite3.connect(f"file:{node.root / 'state' / 'spool' / 'state.db'}?mode=ro", uri=True)
    try:
        (claim_id,) = db.execute("SELECT claim_id FROM claims WHERE slot = ?", (slot,)).fetchone()
    finally:
        db.close()
    return str(claim_id)


def frozen(node: PoolNode) -> bool:
    return "frozen 1" in (job_cgroup(node) / "cgroup.events").read_text()


def test_suspend_and_continue_claim_freeze_and_thaw_a_pool_job(pool: harness.Pool,
                                                               node: PoolNode) -> None:
    """SUSPEND_CLAIM / CONTINUE_CLAIM on the claim the real schedd holds, while the real
    shadow's job runs: its cgroup is frozen and thawed, the shadow logs 010 and 011, and
    the job then runs to its end."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=""),
                       {"job.sh": "#!/bin/sh\nsleep 8\necho done\n"})  # fmt: skip
    job.wait_for_event("001", WAIT_S)
    harness.wait_for("the job's sleep in its cgroup", lambda: any(
        comm(p) == "sleep" for p in job_pids(node)), WAIT_S, 0.1)  # fmt: skip
    claim_id = held_claim_id(node, "slot1_1")

    asyncio.run(claim_command(node.address(), claim_id, Command.SUSPEND_CLAIM))
    node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Suspended")
    harness.wait_for("the job cgroup frozen", lambda: frozen(node), WAIT_S, 0.1)
    asyncio.run(claim_command(node.address(), claim_id, Command.CONTINUE_CLAIM))
    node.wait_for("slot_state_changed", slot="slot1_1", new="Claimed/Busy")
    assert not frozen(node)
    # a second CONTINUE_CLAIM has nothing to resume: refused, logged
    asyncio.run(claim_command(node.address(), claim_id, Command.CONTINUE_CLAIM))
    refused = node.wait_for("pool_command_not_applied", command="CONTINUE_CLAIM")
    assert "not suspended" in refused["why"]
    log = job.wait_for_event("005", WAIT_S)
    assert "Normal termination (return value 0)" in log
    assert job.output("out.txt") == "done\n"
    # the shadow was told at once, as by HTCondor's starter: suspended (010), resumed (011)
    events = job.events()
    assert events.index("001") < events.index("010") < events.index("011") < \
        events.index("005"), events


def test_a_job_without_file_transfer_runs_in_its_shared_iwd(pool: harness.Pool,
                                                            node: PoolNode) -> None:
    """should_transfer_files = NO: no transfer; the job runs in its Iwd on the shared
    filesystem (here /tmp, which the pool's chroot shares) and writes its Out there."""
    with tempfile.TemporaryDirectory(prefix="execd-sharedfs-", dir="/tmp") as shared:
        os.chmod(shared, 0o777)
        submit_text = (
            "executable = /bin/sh\narguments = \"-c 'id -u; pwd; echo oops >&2'\"\n"
            f"initialdir = {shared}\noutput = out.txt\nerror = err.txt\nlog = job.log\n"
            "should_transfer_files = NO\nrequest_memory = 64\nqueue\n")  # fmt: skip
        job = submit_files(pool, submit_text, {})
        job.host_dir = Path(shared)  # the user log and outputs are in the Iwd
        log = job.wait_for_event("005", WAIT_S)
        assert "Normal termination (return value 0)" in log
        assert job.output("out.txt") == f"{NOBODY}\n{shared}\n"
        assert job.output("err.txt") == "oops\n"
        assert "040" not in job.events()  # nothing was transferred
