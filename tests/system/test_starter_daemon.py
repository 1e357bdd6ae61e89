"""The starter's knobs through a real daemon: namespaces, STARTER_EVICT, GPUs, enforcement."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.component.daemon_harness import RunningDaemon, running_daemon

LOOPBACK_CHECK = (
    "import os, socket\n"
    "names = [l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]]\n"
    "srv = socket.create_server(('127.0.0.1', 0))\n"
    "socket.create_connection(srv.getsockname(), timeout=5).sendall(b'up')\n"
    "print(os.getpid(), ' '.join(names), srv.accept()[0].recv(2).decode())\n"
    "print(os.environ['OMP_NUM_THREADS'], os.environ['MKL_NUM_THREADS'],\n"
    "      repr(os.environ['CUDA_VISIBLE_DEVICES']), os.environ['BATCH_SYSTEM'])\n"
)


@pytest.fixture
def node() -> Iterator[RunningDaemon]:
    with running_daemon(
        "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n"
        "MACHINE_RESOURCE_GPUs = GPU-aa11, GPU-bb22\n"
        "USE_PID_NAMESPACES = true\nEXECD_JOB_NETWORK_NAMESPACE = true\n"
        "CGROUP_POLLING_INTERVAL = 1\n"
        "STARTER_EVICT = NumProcesses > 5 && JobState == \"Running\"\n",
        prefix="execd-node-",
    ) as daemon:
        yield daemon


def job(node: RunningDaemon, *args: str) -> subprocess.CompletedProcess[str]:
    return node.execd("job", *args, timeout=60)


def test_a_job_gets_its_own_pid_and_loopback_only_network_namespaces(
    node: RunningDaemon,
) -> None:
    done = job(node, "--cpus", "2", "--", "/usr/bin/python3", "-c", LOOPBACK_CHECK)
    assert done.returncode == 0, done.stderr
    # pid 2 under the namespace's init; only `lo`, and it is up; no GPU requested: none
    # seen (condor_starter's ENVIRONMENT_VALUE_FOR_UnAssignedGPUs)
    assert done.stdout.splitlines() == ["2 lo up", "2 2 '10000' HTCondor"]


def test_cuda_visible_devices_names_only_the_assigned_gpus(node: RunningDaemon) -> None:
    done = job(node, "--gpus", "1", "--", "sh", "-c",
               "echo $CUDA_VISIBLE_DEVICES $NVIDIA_VISIBLE_DEVICES")
    assert done.returncode == 0, done.stderr
    # MACHINE_RESOURCE_GPUs ids have no DeviceUuid: NVIDIA's runtime gets none of them,
    # as from condor_starter
    assert done.stdout.split() in (["GPU-aa11", "none"], ["GPU-bb22", "none"])


def test_configured_gpus_without_devices_are_not_hidden_nor_warned_of_per_job(
        node: RunningDaemon) -> None:
    """GPUs named in MACHINE_RESOURCE_GPUs on a node where NVML found none have no device
    file: STARTER_HIDE_GPU_DEVICES has nothing to deny, and no job's log warns of it
    (the mechanism itself: tests/system/test_device_hiding.py)."""
    done = job(node, "--gpus", "1", "--", "sh", "-c", "echo $CUDA_VISIBLE_DEVICES")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("GPU-aa11", "GPU-bb22")
    finished = node.wait_for("job_finished")
    assert finished["exit_code"] == 0
    assert not [e for e in node.events() if e["event"] == "gpu_devices_not_hidden"]


def test_a_job_over_starter_evict_is_evicted(node: RunningDaemon) -> None:
    script = "for i in 1 2 3 4 5 6; do sleep 1000 & done; wait"
    done = job(node, "--", "sh", "-c", script)
    assert done.returncode == 124, done.stderr  # execd job: evicted
    assert "evicted" in done.stderr
    evict = node.wait_for("starter_policy_evict")
    assert evict["action"] == "vacate"  # STARTER_WANT_VACATE defaults to true: soft first
    assert evict["processes"] > 5
    finished = node.wait_for("job_finished", slot=evict["slot"])
    assert finished["reason"] == "soft_killed"


def test_slot_ads_and_log_say_who_enforces_each_limit(node: RunningDaemon) -> None:
    (announced,) = [e for e in node.events() if e["event"] == "cgroup_enforcement"]  # once
    ads = node.execd("status", "-af", "CgroupEnforcement", "CgroupMemoryEnforcement",
                     "CgroupCpuEnforcement", "CgroupPidsEnforcement")
    assert ads.returncode == 0, ads.stderr
    line = ads.stdout.strip()
    if announced["controllers"]:  # a host with controllers (not this CI machine's hybrid)
        assert line.split()[3] == announced["memory"]  # after the 3 words of the summary
        return
    assert announced["memory"] == "policy"
    assert announced["cpu"] == announced["pids"] == "none"
    assert line == "memory:policy cpu:none pids:none policy none none"


def test_a_job_starts_with_the_signal_dispositions_a_condor_starter_job_has(
        node: RunningDaemon) -> None:
    """Only SIGPIPE ignored (SigIgn 0x1000), as a job of condor_starter 25.14.1 (checked
    in the pool tier's pool): the starter's own SIGHUP ignore must not reach the job,
    where an ignored signal would stay ignored across exec (not even a shell's trap
    could catch it). Nothing blocked."""
    done = job(node, "--", "sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status")
    assert done.returncode == 0, done.stderr
    blocked, ignored = (int(v, 16) for k, v in zip(*[iter(done.stdout.split())] * 2,
                                                   strict=True) if k in ("SigBlk:", "SigIgn:"))
    assert blocked == 0
    # Signals 1-31: 32 and 33 are glibc's own (a job's libc sets them up itself), and
    # whoever started the test may have them ignored (GNU make does): glibc will not let
    # them be reset, nor does a job care.
    assert ignored & 0x7FFFFFFF == 1 << (signal.SIGPIPE - 1)
