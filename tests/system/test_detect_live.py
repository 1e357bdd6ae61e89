"""Detection on this machine's real /proc, /sys, statvfs and NVML, and a real inventory
command run through the live reader."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from execd.errors import ResourceError
from execd.machine.custom import run_inventory
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.reader import LiveHostReader


def test_live_node_matches_what_the_kernel_says(tmp_path: Path) -> None:
    facts = detect_machine(LiveHostReader(), DetectionParams(execute_dir=str(tmp_path)))
    assert facts.detected_cpus == len(os.sched_getaffinity(0))
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert facts.detected_memory_mb <= int(meminfo[1]) // 1024
    st = os.statvfs(tmp_path)
    assert abs(facts.total_disk_kb - st.f_bavail * st.f_frsize // 1024) < 100 * 1024
    assert facts.hostname


def test_live_inventory_command(tmp_path: Path) -> None:
    script = tmp_path / "inventory"
    script.write_text('#!/bin/sh\necho \'DetectedWidget = "w0, w1, w2"\'\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    res = run_inventory(LiveHostReader(), "Widget", str(script))
    assert res.instances == ("w0", "w1", "w2")


def test_live_inventory_garbage_and_missing_command(tmp_path: Path) -> None:
    script = tmp_path / "inventory"
    script.write_text("#!/bin/sh\necho 'not an ad'\n")
    script.chmod(0o755)
    with pytest.raises(ResourceError, match="no DetectedWidget line"):
        run_inventory(LiveHostReader(), "Widget", str(script))
    with pytest.raises(ResourceError, match="absent is not installed"):
        run_inventory(LiveHostReader(), "Widget", str(tmp_path / "absent"))


def test_live_vanished_execute_directory(tmp_path: Path) -> None:
    with pytest.raises(ResourceError, match="does not exist"):
        detect_machine(LiveHostReader(), DetectionParams(execute_dir=str(tmp_path / "gone")))
