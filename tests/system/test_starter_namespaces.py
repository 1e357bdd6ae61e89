"""USE_PID_NAMESPACES and the loopback-only network namespace, on the real kernel."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from starter_helpers import finished, start, wait_until

from execd.cgroups.tree import CgroupTree
from execd.starter.spec import StarterSpec


def test_the_job_is_pid_2_under_an_init_and_sees_only_its_own_namespace(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = (
        "echo pid=$$ ppid=$PPID; ls /proc | grep -c '^[0-9]'; "
        "sleep 1000 & sleep 1000 & echo started; exit 4"
    )
    handle = start(make_spec(script, pid_namespace=True), workdir)
    report = finished(handle, workdir)
    out = (workdir / "iwd/out.txt").read_text().splitlines()
    # Like condor_pid_ns_init: pid 1 is the namespace's init, the job is its child.
    assert out[0] == "pid=2 ppid=1"
    # /proc is the namespace's own: init, the shell, ls and grep at most.
    assert int(out[1]) <= 4
    assert report["ExitCode"] == 4  # the job's status, passed on by the init
    assert report["ExitReason"] == "exited"
    assert not (tree.base / "slot1_1.slice").exists(), "nothing is left in the cgroup"


def test_soft_kill_reaches_the_job_through_the_init(
    tree: CgroupTree, workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    script = "trap 'echo got TERM; exit 5' TERM; touch ready; while :; do sleep 0.05; done"
    handle = start(make_spec(script, pid_namespace=True), workdir)
    job = tree.job("slot1_1")
    wait_until((workdir / "iwd/ready").exists, "the job's trap to be set")
    assert len(job.pids()) >= 2  # the init and the job
    handle.soft_kill()
    report = finished(handle, workdir)
    assert report["ExitCode"] == 5
    assert report["ExitReason"] == "soft_killed"
    assert (workdir / "iwd/out.txt").read_text() == "got TERM\n"


def test_a_job_killed_by_a_signal_is_reported_as_such_not_as_the_init(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    handle = start(make_spec("kill -USR2 $$", pid_namespace=True), workdir)
    report = finished(handle, workdir)
    assert report["ExitBySignal"] is True
    assert report["ExitSignal"] == signal.SIGUSR2


def test_a_missing_program_in_a_pid_namespace_still_holds_the_job(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    handle = start(make_spec("", cmd="/no/such/program", pid_namespace=True), workdir)
    report = finished(handle, workdir)
    assert report["ExitReason"] == "spawn_failed"
    assert report["HoldReasonSubCode"] == 2  # ENOENT


LOOPBACK_CHECK = (
    "import socket\n"
    "names = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
    "print(' '.join(names))\n"
    "srv = socket.create_server(('127.0.0.1', 0))\n"
    "socket.create_connection(srv.getsockname(), timeout=5).sendall(b'up')\n"
    "print(srv.accept()[0].recv(2).decode())\n"
)


def test_network_namespace_gives_the_job_loopback_only_and_up(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    spec = make_spec("", cmd="/usr/bin/python3", args=["-c", LOOPBACK_CHECK],
                     network_namespace=True)
    report = finished(start(spec, workdir), workdir)
    assert report["ExitCode"] == 0, (workdir / "iwd/err.txt").read_text()
    assert (workdir / "iwd/out.txt").read_text().splitlines() == ["lo", "up"]


def test_both_namespaces_together(
    workdir: Path, make_spec: Callable[..., StarterSpec]
) -> None:
    spec = make_spec("", cmd="/usr/bin/python3", args=["-c", LOOPBACK_CHECK + "import os\n"
                     "print(os.getpid())\n"], network_namespace=True, pid_namespace=True)
    report = finished(start(spec, workdir), workdir)
    assert report["ExitCode"] == 0, (workdir / "iwd/err.txt").read_text()
    assert (workdir / "iwd/out.txt").read_text().splitlines() == ["lo", "up", "2"]
