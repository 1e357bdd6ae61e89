"""fork_into_cgroup: the child is in the job's cgroup from its first instruction (it never
ran anywhere else), and the parent gets its pid as from os.fork."""

from __future__ import annotations

import os

from execd.cgroups.tree import CgroupTree
from execd.starter.clone import fork_into_cgroup


def test_the_child_is_born_in_the_cgroup(tree: CgroupTree) -> None:
    job = tree.job("slot1_1")
    job.create()
    read_fd, write_fd = os.pipe()
    pid = fork_into_cgroup(str(job.leaf))
    if pid == 0:  # the child: where am I, before doing anything else?
        try:
            with open("/proc/self/cgroup") as f:
                os.write(write_fd, f.read().encode())
        finally:
            os._exit(0)
    assert pid is not None, "clone3(CLONE_INTO_CGROUP) is available on this kernel"
    os.close(write_fd)
    born_in = os.read(read_fd, 4096).decode()
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    mount = tree.hierarchy.mount
    assert f"0::/{job.leaf.relative_to(mount)}\n" in born_in


def test_no_such_cgroup_forks_nothing(tree: CgroupTree) -> None:
    assert fork_into_cgroup(str(tree.base / "no-such.slice" / "job")) is None
