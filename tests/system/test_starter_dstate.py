"""A job in uninterruptible sleep (D state) still ends with zero processes left.

How an unprivileged job gets into D state here: glibc's posix_spawn clones the child
with CLONE_VFORK, so the parent sleeps in the kernel until the child execs; the child
first opens a FIFO nobody writes, so it never execs, and the parent stays in `D`
(TASK_KILLABLE: uninterruptible for every signal but a fatal one). A FUSE or NFS
server that never answers would do the same but needs privileges a job does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from starter_helpers import finished, start, wait_until

from execd.cgroups.tree import CgroupTree
from execd.starter.spec import StarterSpec

VFORK_STUCK = (
    "import os\n"
    "fifo = os.path.join(os.environ['_CONDOR_SCRATCH_DIR'], 'never-written')\n"
    "os.mkfifo(fifo)\n"
    "os.posix_spawn('/bin/true', ['true'], os.environ,\n"
    "               file_actions=[(os.POSIX_SPAWN_OPEN, 0, fifo, os.O_RDONLY, 0)])\n"
)


def states(tree: CgroupTree) -> dict[int, str]:
    """pid -> the state letter /proc/<pid>/stat shows, for every process of the job."""
    found: dict[int, str] = {}
    for pid in tree.job("slot1_1").pids():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # gone between the listing and the read (ENOENT or ESRCH)
            continue
        found[pid] = stat.rsplit(")", 1)[1].split()[0]
    return found


def test_a_job_in_uninterruptible_sleep_is_hard_killed_to_zero_processes(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    spec = make_spec("", cmd="/usr/bin/python3", args=["-c", VFORK_STUCK])
    handle = start(spec, workdir)
    # Both processes there and one in D: a lone python3 can also pass through D for a
    # moment while it starts (a page fault on a loaded machine), before it vforks.
    wait_until(lambda: sorted(states(tree).values()) in (["D", "S"], ["D", "D"]),
               "the job's parent in D state beside its vfork child")
    handle.hard_kill()
    report = finished(handle, workdir)
    assert report["ExitReason"] == "hard_killed"
    assert report["NumProcesses"] == 2  # the D-state parent and its vfork child
    assert "SlotBrokenReason" not in report
    assert not (tree.base / "slot1_1.slice").exists(), "the cgroup was emptied and removed"


def test_a_d_state_process_left_behind_by_the_job_is_killed_at_exit(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = (
        f"/usr/bin/python3 -c \"{VFORK_STUCK}\" & child=$!; "
        "until grep -q ') D ' /proc/$child/stat; do sleep 0.01; done; echo stuck; exit 0"
    )
    handle = start(make_spec(script), workdir)
    report = finished(handle, workdir)
    assert (workdir / "iwd/out.txt").read_text() == "stuck\n"
    assert report["ExitCode"] == 0
    assert int(str(report["NumProcesses"])) >= 2
    assert "SlotBrokenReason" not in report
    assert not (tree.base / "slot1_1.slice").exists(), "the cgroup was emptied and removed"
