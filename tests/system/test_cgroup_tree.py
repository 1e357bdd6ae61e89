"""The cgroup layer against the real kernel: tracking, freezing, killing, no escapes."""

from __future__ import annotations

import os
import select
import signal
import subprocess
from collections.abc import Iterator

import pytest

from execd.cgroups.tree import CgroupTree, JobCgroup
from execd.errors import CgroupError

SPAWNED: list[subprocess.Popen[bytes]] = []


def spawn_in(job: JobCgroup, script: str) -> subprocess.Popen[bytes]:
    """Start `sh -c script` with its first process already in the job's leaf."""
    procs = str(job.procs_file)

    def enter() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    proc = subprocess.Popen(
        ["sh", "-c", script],
        preexec_fn=enter,  # noqa: PLW1509 - single-threaded test
        stdout=subprocess.PIPE,
    )
    SPAWNED.append(proc)
    return proc


@pytest.fixture(autouse=True)
def reap(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close each spawned shell's pipe and reap it, whatever the test did."""
    yield
    for proc in SPAWNED:
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait(timeout=10)
    SPAWNED.clear()


def test_first_process_is_in_the_leaf_before_exec(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(job, "cat /proc/self/cgroup")
    out, _ = proc.communicate(timeout=10)
    rel = "/" + str(job.leaf.relative_to(tree.hierarchy.mount))
    assert f"0::{rel}\n" in out.decode()
    job.destroy()


def test_freeze_holds_signals_until_thaw(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(job, "trap 'echo got; exit 0' USR1; echo $$; while :; do sleep 1; done")
    assert proc.stdout is not None
    shell = int(proc.stdout.readline())
    job.freeze()
    assert job.frozen()
    os.kill(shell, signal.SIGUSR1)
    # Frozen: the handler cannot run, so nothing arrives on the pipe.
    ready, _, _ = select.select([proc.stdout], [], [], 0.3)
    assert ready == []
    assert shell in job.pids()
    job.thaw()
    assert not job.frozen()
    assert proc.stdout.readline() == b"got\n"
    proc.wait(timeout=10)
    job.kill()
    job.destroy()
    assert not job.slice.exists()


def test_double_forked_setsid_nohup_child_cannot_escape_the_kill(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(
        job,
        "trap '' TERM; setsid sh -c 'nohup env -i sleep 1234 >/dev/null 2>&1 &' ; "
        "nohup env -i sleep 1234 >/dev/null 2>&1 & echo ready; exit 0",
    )
    out, _ = proc.communicate(timeout=10)
    assert out == b"ready\n"
    survivors = job.pids()
    assert len(survivors) == 2, "both orphaned sleeps are still tracked by the cgroup"
    job.kill()
    assert job.pids() == []
    assert not job.populated()
    job.destroy()


def test_fork_bomb_of_a_thousand_processes_ends_with_zero_left(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(
        job,
        "i=0; while [ $i -lt 1000 ]; do sleep 1000 & i=$((i+1)); done; echo ready; "
        "while :; do sleep 1000 & done",
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    assert len(job.pids()) > 1000
    job.kill()
    assert job.pids() == []
    proc.wait(timeout=10)
    job.destroy()


def test_cpu_usage_is_read_from_cpu_stat(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(job, "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
    proc.wait(timeout=60)
    usage = job.usage()
    assert usage.user_usec + usage.system_usec > 10_000
    assert usage.processes == 0
    job.destroy()


def test_removing_a_busy_cgroup_names_the_path(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    proc = spawn_in(job, "echo ready; exec sleep 1000")
    assert proc.stdout is not None
    proc.stdout.readline()
    with pytest.raises(CgroupError, match=str(job.leaf)):
        tree.fs.rmdir(job.leaf)
    job.destroy()
    proc.wait(timeout=10)


def test_bad_slot_name_is_refused(tree: CgroupTree) -> None:
    with pytest.raises(CgroupError, match="cannot name a cgroup"):
        tree.job("../etc")
