"""Kernel facts execd's cgroup code relies on, checked on a real cgroup v2 kernel.

Run inside the VM tier's guest only (tests/vm/test_vm_tier.py boots it). Each test uses
its own subtree from the `cgroup` fixture; processes are started already inside a leaf.
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

import pytest
from guest_cgroups import TestCgroup

MIB = 1 << 20
# Touch every byte: a zero-filled allocation could be left unbacked by the kernel.
ALLOCATE_200_MIB = "b = b'x' * (200 << 20); print('survived', flush=True)"


def limit_memory(cgroup: TestCgroup, leaf: Path, oom_group: bool) -> None:
    cgroup.write("memory.max", str(50 * MIB), leaf)
    cgroup.write("memory.swap.max", "0", leaf)
    cgroup.write("memory.oom.group", "1" if oom_group else "0", leaf)


def test_memory_max_oom_kills_only_the_allocating_process(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    limit_memory(cgroup, job, oom_group=False)
    bystander = cgroup.spawn(job, ["sleep", "600"])
    hog = cgroup.python(job, ALLOCATE_200_MIB)

    out, _ = hog.communicate(timeout=120)

    assert hog.returncode == -signal.SIGKILL
    assert "survived" not in out
    assert cgroup.keyed("memory.events", job)["oom_kill"] >= 1
    assert bystander.poll() is None, "without memory.oom.group the OOM killer picks one"


def test_memory_oom_group_kills_the_whole_group(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    limit_memory(cgroup, job, oom_group=True)
    bystander = cgroup.spawn(job, ["sleep", "600"])
    hog = cgroup.python(job, ALLOCATE_200_MIB)

    hog.communicate(timeout=120)
    bystander.communicate(timeout=60)

    assert hog.returncode == -signal.SIGKILL
    assert bystander.returncode == -signal.SIGKILL
    events = cgroup.keyed("memory.events", job)
    assert events["oom_kill"] >= 2
    assert events["oom_group_kill"] >= 1


def test_memory_peak_reflects_usage(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    user = cgroup.python(job, "b = b'x' * (64 << 20); print(len(b))")

    _, err = user.communicate(timeout=120)

    assert user.returncode == 0, err
    assert int(cgroup.read("memory.peak", job)) >= 64 * MIB
    assert int(cgroup.read("memory.current", job)) < 64 * MIB, "the process has exited"


def test_cpu_weight_and_max_are_writable(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    cgroup.write("cpu.weight", "50", job)
    cgroup.write("cpu.max", "50000 100000", job)

    assert cgroup.read("cpu.weight", job).strip() == "50"
    assert cgroup.read("cpu.max", job).split() == ["50000", "100000"]
    with pytest.raises(OSError) as out_of_range:
        cgroup.write("cpu.weight", "0", job)
    assert out_of_range.value.errno == errno.ERANGE


FORK_UNTIL_REFUSED = """
import os
children = []
try:
    for _ in range(50):
        pid = os.fork()
        if pid == 0:
            os.pause()
        children.append(pid)
    print("no-error", len(children))
except OSError as e:
    print(e.errno, len(children))
for pid in children:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
"""


def test_pids_max_refuses_fork_with_eagain(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    cgroup.write("pids.max", "5", job)
    bomb = cgroup.python(job, FORK_UNTIL_REFUSED)

    out, err = bomb.communicate(timeout=120)

    assert out.split() == [str(errno.EAGAIN), "4"], err  # the parent counts too
    assert cgroup.keyed("pids.events", job)["max"] >= 1


def test_process_started_in_leaf_sees_its_leaf(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    reader = cgroup.spawn(job, ["cat", "/proc/self/cgroup"])

    out, _ = reader.communicate(timeout=60)

    assert out.strip() == f"0::/{job.relative_to('/sys/fs/cgroup')}"


def test_exec_leaves_exactly_one_pid_in_the_leaf(cgroup: TestCgroup) -> None:
    job = cgroup.leaf("job")
    reader = cgroup.spawn(job, ["cat", str(job / "cgroup.procs")])

    out, _ = reader.communicate(timeout=60)

    assert out.split() == [str(reader.pid)]
