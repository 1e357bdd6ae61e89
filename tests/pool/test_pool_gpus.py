"""Jobs that request GPUs see only theirs, on `execd run` as on the pool's condor_startd.

Both execute points get their GPUs from the same configuration and have one partitionable
slot of 3 CPUs / 1024 MB. execd runs on the host, so its LIBEXEC holds a
`condor_gpu_discovery` that runs the chroot's (`chroot <root>
/usr/libexec/condor/condor_gpu_discovery "$@"`), except with real GPUs:

- `use feature : GPUs` (MACHINE_RESOURCE_INVENTORY_GPUs = condor_gpu_discovery
  -properties $(GPU_DISCOVERY_EXTRA)): `simulated`, `GPU_DISCOVERY_EXTRA =
  -simulate:2,2`, two simulated Tesla V100s; `simulated-mig`: `-simulate:5,1`, an A100
  split into two MIG devices (their NVIDIA_VISIBLE_DEVICES is the MIG-... DeviceUuid
  itself).
- without it, condor_startd 25.x's own discovery, `$(LIBEXEC)/condor_gpu_discovery
  $(STARTD_DETECT_GPUS)`: `detected`, `STARTD_DETECT_GPUS = -properties -simulate:2,2`
  (the V100s again); `disabled`, `STARTD_DETECT_GPUS = false` (no GPU attribute at all,
  no GPU variable for jobs, no GPUs row in the 005 table); `none-found`, the default, on
  a machine without GPUs (`DetectedGPUs=0`: GPUs = 0, the UnAssigned variables);
  `offline`, `detected` with `OFFLINE_MACHINE_RESOURCE_GPUs = GPU-a0223334`.
- `real` (only with EXECD_GPU_POOL=1, on a machine with NVIDIA GPUs, instead of
  `none-found`): condor_startd runs the chroot's condor_gpu_discovery on the real GPUs
  (the chroot must see the driver's libraries), execd has no condor_gpu_discovery and
  asks NVML (`gpu_inventory_not_installed`).

Jobs: as many 1-GPU jobs as there are GPUs (at most 2) and one with `request_gpus = 0`,
running at the same time, each in its own d-slot (each waits until the test has seen
every one of them Busy in condor_status). Each prints its GPU variables
(CUDA_VISIBLE_DEVICES, GPU_DEVICE_ORDINAL, NVIDIA_VISIBLE_DEVICES, _CONDOR_Assigned*),
sorted, and whether it can open each /dev/nvidia<N> (none exist where GPUs are simulated;
with real ones, a GPU job opens its own only and the job without one opens none:
STARTER_HIDE_GPU_DEVICES). Compared: the
user-log events, the 001 resource lines (AvailableGPUs, the GPU's nested ad) and the 005
resource table (its Assigned column), the exit status, the output files, and the slot
ads' GPU attributes (GPUs, AssignedGPUs, AvailableGPUs, DetectedGPUs, the GPUs_<prop>
properties) in condor_status, idle and while the GPU jobs run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, PoolNode, start_node, wait_pool
from test_pool_jobs import SlotView, slot_view, submit_files, timeless
from test_pool_preemption import restart_startd
from test_shadow_pool import termination

GPU_VARIABLES = "^(CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|NVIDIA_VISIBLE_DEVICES|_CONDOR_Assigned)"
# $1: a file the test creates once it has seen every GPU job running (at most 2 minutes)
GPU_SCRIPT = f"""#!/bin/sh
env | grep -E '{GPU_VARIABLES}' | sort
for d in /dev/nvidia[0-9]*; do
    [ -e "$d" ] || continue
    if (: <> "$d") 2>/dev/null; then echo "DEVICE $d=open"; else echo "DEVICE $d=denied"; fi
done
n=0
while [ -n "$1" ] && [ ! -e "$1" ]; do
    n=$((n + 1)); [ $n -gt 1200 ] && exit 7
    sleep 0.1
done
exit 0
"""
GPU_SUBMIT = """\
executable = job.sh
arguments = {go}
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_cpus = 1
request_memory = 64
request_gpus = {gpus}
queue
"""
REFERENCE_CONFIG = "/etc/condor/config.d/99-execd-simulated-gpus.conf"
NODE = "NUM_CPUS = 3\nMEMORY = 1024\n"  # a CPU for each job: all run at once
SLOT_GPU_ATTRS = ("GPUs", "TotalGPUs", "TotalSlotGPUs", "AssignedGPUs", "AvailableGPUs",
                  "DetectedGPUs", "OfflineGPUs")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class GpuSource:
    """Where both execute points' GPUs come from."""

    name: str
    config: str  # condor_startd's (and, LIBEXEC aside, execd's) GPU configuration
    # True: GPUs found; False: a GPUs resource of none (TotalGPUs = 0); None: no GPUs
    # resource at all (no GPU attribute)
    found: bool | None = True

    def has_its_gpus(self, ad: dict[str, Any]) -> bool:
        if self.found is None:
            return "TotalGPUs" not in ad
        return "TotalGPUs" in ad and (ad["TotalGPUs"] > 0) == self.found

    def execd_config(self, pool: harness.Pool, root: Path) -> str:
        """execd on the host: the chroot's condor_gpu_discovery through a LIBEXEC of its
        own; an empty LIBEXEC (NVML) with real GPUs."""
        libexec = root / "libexec"
        libexec.mkdir()
        if self is not REAL:
            discovery = libexec / "condor_gpu_discovery"
            discovery.write_text(f'#!/bin/sh\nexec chroot {pool.root} '
                                 f'/usr/libexec/condor/condor_gpu_discovery "$@"\n')  # fmt: skip
            discovery.chmod(0o755)
        return f"LIBEXEC = {libexec}\n{self.config}"


def feature(discovery_extra: str) -> str:
    return f"use feature : GPUs\nGPU_DISCOVERY_EXTRA = {discovery_extra}\n"


SIMULATED = GpuSource("simulated", feature("-simulate:2,2"))  # two Tesla V100-PCIE-16GB
MIG = GpuSource("simulated-mig", feature("-simulate:5,1"))  # an A100 as two MIG devices
# STARTD_DETECT_GPUS without use feature : GPUs: simulated V100s again; the default (this
# machine has no GPU: condor_gpu_discovery prints DetectedGPUs=0); discovery off
DETECTED = GpuSource("detected", "STARTD_DETECT_GPUS = -properties -simulate:2,2\n")
NONE_FOUND = GpuSource("none-found", "", found=False)
# the first V100 taken offline (OFFLINE_MACHINE_RESOURCE_GPUs): one GPU job
OFFLINE = GpuSource("offline", DETECTED.config + "OFFLINE_MACHINE_RESOURCE_GPUs = GPU-a0223334\n")
DISABLED = GpuSource("disabled", "STARTD_DETECT_GPUS = false\n", found=None)
REAL = GpuSource("real", feature(""))
SOURCES = [SIMULATED, MIG, DETECTED, DISABLED, OFFLINE,
           REAL if os.environ.get("EXECD_GPU_POOL") == "1" else NONE_FOUND]


@dataclasses.dataclass
class Seen:
    """What users see of the jobs and the slots they ran in."""

    idle_slots: dict[str, dict[str, Any]]  # by slot name
    busy_slots: list[dict[str, Any]]  # every slot while the jobs run, in a stable order
    gpu_jobs: list[tuple[list[str], str, str, SlotView]]
    no_gpu_job: tuple[list[str], str, str, SlotView]


def gpu_attributes(ad: dict[str, Any]) -> dict[str, Any]:
    """A slot's GPU attributes in condor_status (-json), with its type and activity."""
    return {k: v for k, v in sorted(ad.items())
            if k in (*SLOT_GPU_ATTRS, "SlotType", "Activity") or k.startswith("GPUs_")}


def seen(job: harness.SubmittedJob) -> tuple[list[str], str, str, SlotView]:
    """The job's events up to 005, its exit, its output and what the user log says of its
    slot (001's resource lines, 005's resource table)."""
    log = job.wait_for_event("005", WAIT_S)
    return timeless(job.events(), "005"), termination(log), job.output("out.txt"), \
        slot_view(job, "005")


def run_gpu_jobs(pool: harness.Pool, node: PoolNode | None, source: GpuSource) -> Seen:
    """The GPU jobs and the job without a GPU, all at once in their own d-slots."""
    idle = wait_pool(pool, "the p-slot with its GPUs", lambda s: len(s) == 1 and all(
        source.has_its_gpus(ad) for ad in s.values()) and s)
    total = int(next(iter(idle.values())).get("TotalGPUs", 0))
    count = min(2, total)
    go = Path(f"/tmp/execd-gpus-{os.getpid()}-{pool._jobs}")  # one /tmp: host and chroot
    jobs: list[harness.SubmittedJob] = []
    try:
        for gpus in [1] * count + [0]:
            jobs.append(submit_files(pool, GPU_SUBMIT.format(go=go, gpus=gpus),
                                     {"job.sh": GPU_SCRIPT}))  # fmt: skip
        busy = wait_pool(pool, "every job running, the p-slot's ad updated", lambda s: sum(
            ad.get("SlotType") == "Dynamic" and ad.get("Activity") == "Busy"
            for ad in s.values()) == len(jobs) and [ad.get("GPUs", 0) for ad in s.values()
            if ad.get("SlotType") == "Partitionable"] == [total - count] and s)  # fmt: skip
        go.touch()
        done = [seen(job) for job in jobs]
        if node is not None:  # they ran through execd's starter
            spawned = [e for e in node.events() if e["event"] == "starter_spawned"]
            assert len(spawned) == len(jobs), spawned
        return Seen({name.split("@")[0]: gpu_attributes(ad) for name, ad in idle.items()},
                    sorted((gpu_attributes(ad) for ad in busy.values()), key=repr),
                    sorted(done[:-1]), done[-1])  # fmt: skip
    finally:
        go.unlink(missing_ok=True)
        for job in jobs:
            pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


@contextlib.contextmanager
def reference_gpus(pool: harness.Pool, source: GpuSource) -> Iterator[None]:
    """condor_startd restarted with the GPUs and execd's node size, and back afterwards."""
    if source is REAL:  # say why condor_startd would show no GPU
        found = pool.tool("/usr/libexec/condor/condor_gpu_discovery", "-properties")
        assert 'DetectedGPUs="' in found.stdout.replace(" ", ""), (
            "the chroot's condor_gpu_discovery finds no GPU (the chroot needs the NVIDIA "
            f"driver's libraries): {found.stdout.strip()} {found.stderr.strip()}")
    config = pool.host_path(REFERENCE_CONFIG)
    config.write_text(NODE + source.config)
    try:  # its ad, not the one it had before (NODE's memory tells them apart)
        restart_startd(pool, lambda ad: ad["TotalMemory"] == 1024 and source.has_its_gpus(ad))
        yield
    finally:
        config.unlink()
        restart_startd(pool, lambda ad: ad["TotalMemory"] != 1024)


@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_gpu_jobs_see_only_their_gpus_as_on_condor_startd(
        running_pool: harness.RunningPool, source: GpuSource) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp), "STARTER_UPDATE_INTERVAL = 2\n" + NODE
                          + source.execd_config(pool, Path(tmp)))  # fmt: skip
        try:
            if source is REAL:  # execd looked for them through NVML as it started
                found = {e["event"]: e for e in node.events()}
                assert found["gpu_inventory_not_installed"]["instead"] == "NVML"
                assert "gpu_detection_skipped" not in found, \
                    f"NVML on this host finds no GPU: {found['gpu_detection_skipped']}"
            ours = run_gpu_jobs(pool, node, source)
        finally:
            node.stop(signal.SIGQUIT)
    reference = running_pool.get(with_startd=True)
    with reference_gpus(reference, source):
        theirs = run_gpu_jobs(reference, None, source)
    assert ours.idle_slots == theirs.idle_slots
    assert ours.busy_slots == theirs.busy_slots
    assert ours.gpu_jobs == theirs.gpu_jobs
    assert ours.no_gpu_job == theirs.no_gpu_job
    # each GPU job saw its own GPU and no other; the job without one saw none
    outputs = [dict(line.split("=", 1) for line in out.splitlines())
               for _events, _exit, out, _view in ours.gpu_jobs]  # fmt: skip
    assigned = [env["_CONDOR_AssignedGPUs"] for env in outputs]
    assert len(set(assigned)) == len(assigned) and all("," not in a for a in assigned)
    for env in outputs:
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] != "none"
    no_gpu = ours.no_gpu_job[2].splitlines()
    # the UnAssigned values where the node has a GPUs resource; nothing where it has none
    assert [line for line in no_gpu if not line.startswith("DEVICE ")] == [
        "CUDA_VISIBLE_DEVICES=10000", "GPU_DEVICE_ORDINAL=10000",
        "NVIDIA_VISIBLE_DEVICES=none", "_CONDOR_AssignedGPUs=10000"] * (
        source.found is not None)  # fmt: skip
    if source is REAL:  # and at the device files (STARTER_HIDE_GPU_DEVICES): its own only
        for env in outputs:
            opened = [k for k, v in env.items() if k.startswith("DEVICE ") and v == "open"]
            assert len(opened) == 1, env
        hidden = [line for line in no_gpu if line.startswith("DEVICE ")]
        assert hidden and all(line.endswith("=denied") for line in hidden), no_gpu
    assert all(exit_line == "Normal termination (return value 0)"
               for _events, exit_line, _out, _view in [*ours.gpu_jobs, ours.no_gpu_job])
    if source in (SIMULATED, DETECTED):
        assert sorted(assigned) == ["GPU-a0223334", "GPU-b1223334"]
        assert ours.idle_slots["slot1"]["DetectedGPUs"] == "GPU-a0223334, GPU-b1223334"
        assert ours.idle_slots["slot1"]["GPUs_DeviceName"] == "Tesla V100-PCIE-16GB"
    if source is OFFLINE:  # the other V100 only, and every slot says which is offline
        assert assigned == ["GPU-b1223334"]
        assert ours.idle_slots["slot1"]["TotalGPUs"] == 1
        assert {ad["OfflineGPUs"] for ad in ours.busy_slots} == {"GPU-a0223334"}
    if source is NONE_FOUND:
        assert ours.idle_slots["slot1"] == {"Activity": "Idle", "DetectedGPUs": 0, "GPUs": 0,
            "SlotType": "Partitionable", "TotalGPUs": 0, "TotalSlotGPUs": 0}  # fmt: skip
    if source is DISABLED:
        assert ours.idle_slots["slot1"] == {"Activity": "Idle", "SlotType": "Partitionable"}
        _execute, tables = ours.no_gpu_job[3]  # no GPUs row in the 005 event's table
        assert tables and not [row for _code, rows in tables for row in rows if "GPU" in row[0]]
    if source is MIG:
        assert all(env["NVIDIA_VISIBLE_DEVICES"] == env["_CONDOR_AssignedGPUs"]
                   and env["_CONDOR_AssignedGPUs"].startswith("MIG-GPU-") for env in outputs)
