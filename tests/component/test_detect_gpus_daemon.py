"""`execd run` discovers GPUs as condor_startd 25.x does without `use feature : GPUs`: it
runs `$(LIBEXEC)/condor_gpu_discovery $(STARTD_DETECT_GPUS)` (a real program here, a
script printing what the pool chroot's `-properties -simulate:2,2` prints), and with
STARTD_DETECT_GPUS = true it logs a configuration error naming the knob and runs on
without GPUs."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.component.daemon_harness import RunningDaemon, write_script

# the pool chroot's `condor_gpu_discovery -properties -simulate:2,2` (HTCondor 25.14.1)
SIMULATED = """\
DetectedGPUs="GPU-a0223334, GPU-b1223334"
Common=[ Capability=7.0; DeviceName="Tesla V100-PCIE-16GB"; ECCEnabled=true; GlobalMemoryMb=24220; ]
GPU_a0223334=[ id="GPU-a0223334"; DevicePciBusId="0000:40:00.0"; DeviceUuid="a0223334-4445-5667-899a-abbccddeeff0"; ]
GPU_b1223334=[ id="GPU-b1223334"; DevicePciBusId="0000:41:00.0"; DeviceUuid="b1223334-4445-5667-899a-abbccddeeff0"; ]
"""  # noqa: E501 - the program's lines as they are


def slot1(daemon: RunningDaemon) -> dict[str, Any]:
    done = daemon.execd("status", "-json")
    assert done.returncode == 0, done.stderr
    (ad,) = json.loads(done.stdout)
    return dict(ad)


def test_condor_gpu_discovery_in_libexec_runs_with_startd_detect_gpus(tmp_path: Path) -> None:
    libexec = tmp_path / "libexec"
    libexec.mkdir()
    args = tmp_path / "args"
    write_script(libexec, "condor_gpu_discovery",
                 f'echo "$@" > {args}\ncat <<"EOF"\n{SIMULATED}EOF\n')  # fmt: skip
    daemon = RunningDaemon(tmp_path, f"LIBEXEC = {libexec}\nGPU_DISCOVERY_EXTRA = -extra\n"
                           "STARTD_DETECT_GPUS = $(STARTD_DETECT_GPUS) -simulate:2,2\n").start()
    try:
        ad = slot1(daemon)
    finally:
        daemon.stop(signal.SIGQUIT)
    assert args.read_text() == "-properties -extra -simulate:2,2\n"
    assert (ad["TotalGPUs"], ad["AssignedGPUs"], ad["GPUs_DeviceName"]) == (
        2, "GPU-a0223334,GPU-b1223334", "Tesla V100-PCIE-16GB")
    assert ad["DetectedGPUs"] == "GPU-a0223334, GPU-b1223334"


def test_startd_detect_gpus_true_is_a_logged_config_error_and_no_gpus(tmp_path: Path) -> None:
    daemon = RunningDaemon(tmp_path, "STARTD_DETECT_GPUS = true\n").start()
    try:
        ad = slot1(daemon)  # it runs on
    finally:
        daemon.stop(signal.SIGQUIT)
    (error,) = [e for e in daemon.events() if e["event"] == "config_invalid"]  # at startup
    assert error["knob"] == "STARTD_DETECT_GPUS"
    assert (error["level"], error["value"]) == ("error", "true")
    assert ad["MachineResources"] == "Cpus Memory Disk Swap"
    assert not [key for key in ad if "GPU" in key.upper()]


def test_offline_ids_changed_by_a_reload_are_said_to_need_a_restart(tmp_path: Path) -> None:
    """condor_startd applies OFFLINE_MACHINE_RESOURCE_<name> at reconfig; execd reads it
    at startup only, and says so when a reload changes it."""
    daemon = RunningDaemon(tmp_path).start()
    try:
        daemon.config.write_text(daemon.config_text("OFFLINE_MACHINE_RESOURCE_GPUs = GPU-a\n"))
        daemon.send(signal.SIGHUP)
        warned = daemon.wait_for("reconfig_needs_restart")
        daemon.wait_for("reconfig_applied")
    finally:
        daemon.stop(signal.SIGQUIT)
    assert warned["reason"] == "OFFLINE_MACHINE_RESOURCE_GPUs changed"
