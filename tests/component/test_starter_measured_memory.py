"""The resident set the starter reports in its status (the job updates' ResidentSetSize)
is the largest it measured so far, as condor_starter's (VanillaProc's max_rss), and is
measured as condor_starter 25.x measures it on cgroup v2: memory.stat's anon + shmem,
not memory.current's page cache; through the fake cgroup seam on a full cgroup v2 host."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fake_cgroupfs import RecordingCgroupFS

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.tree import CgroupTree
from execd.starter.run import Starter
from execd.starter.spec import StarterSpec

MOUNT = Path("/sys/fs/cgroup")
MB = 1024 * 1024


def starter(status_path: Path, **kw: object) -> tuple[RecordingCgroupFS, Starter]:
    fs = RecordingCgroupFS()
    fs.add_cgroup(MOUNT)
    CgroupTree(fs, Hierarchy(MOUNT, frozenset({"cpu", "memory", "pids"})), "htcondor").setup()
    spec = StarterSpec(job_id="7.0", slot_name="slot1_3", cmd="/bin/true", args=[], env={},
                       owner="nobody", execute_dir="/x", report_path="/x/r",
                       cgroup_mount=str(MOUNT), base_cgroup="htcondor", memory_mb=1000,
                       cpus=1, status_path=str(status_path))._replace(**kw)  # fmt: skip
    s = Starter(spec, fs)
    s.cgroup.create()
    s.started = time.monotonic()  # as start() sets it
    return fs, s


def measured(
    fs: RecordingCgroupFS, s: Starter, anon: int, user_usec: int, *,
    current: int | None = None, shmem: int = 0, file: int = 0, peak: int | None = None,
) -> dict[str, object]:
    # memory.current is at least what memory.stat counts (the page cache included)
    fs.files[s.cgroup.slice / "memory.current"] = str(current or anon + shmem + file)
    fs.files[s.cgroup.slice / "memory.stat"] = (
        f"anon {anon}\nfile {file}\nkernel 1048576\nshmem {shmem}\ninactive_anon 0\n"
    )
    if peak is not None:
        fs.files[s.cgroup.slice / "memory.peak"] = str(peak)
    fs.files[s.cgroup.slice / "cpu.stat"] = f"usage_usec {user_usec}\nuser_usec {user_usec}\n"
    s.measure()
    s.publish_status()
    status: dict[str, object] = json.loads(Path(s.spec.status_path or "").read_text())
    return status


def test_status_resident_set_is_the_peak_measured_not_the_current(tmp_path: Path) -> None:
    fs, s = starter(tmp_path / "status.json")
    assert measured(fs, s, 80 * MB, 1_500_000)["ResidentSetSize"] == 80 * 1024
    # the job freed its memory: the next measurement still reports the peak
    after = measured(fs, s, 10 * MB, 2_700_000)
    assert after["ResidentSetSize"] == 80 * 1024
    # the status keeps CPU's fraction (CPUsUsage is computed from it); the job updates
    # send whole seconds (report.whole_seconds)
    assert after["RemoteUserCpu"] == 2.7
    assert measured(fs, s, 90 * MB, 2_800_000)["ResidentSetSize"] == 90 * 1024


def test_resident_set_is_anon_and_shmem_not_the_page_cache(tmp_path: Path) -> None:
    # a job that wrote 600 MiB of files: memory.current counts their page cache;
    # condor_starter (ProcFamilyDirectCgroupV2::get_usage) reports anon + shmem
    fs, s = starter(tmp_path / "status.json")
    status = measured(fs, s, 5 * MB, 1_000_000, current=600 * MB, peak=600 * MB)
    assert status["ResidentSetSize"] == 5120  # KiB, not 614400
    assert status["ImageSize"] == 5120  # memory.peak unused: CGROUP_USE_PEAK_MEMORY false
    status = measured(fs, s, 3 * MB, 1_000_000, shmem=2 * MB, current=600 * MB)
    assert status["ResidentSetSize"] == 5120  # shmem (tmpfs, shm segments) counts


def test_use_peak_memory_takes_memory_peak_less_its_cache(tmp_path: Path) -> None:
    fs, s = starter(tmp_path / "status.json", use_peak_memory=True)
    status = measured(fs, s, 5 * MB, 1_000_000, file=500 * MB, peak=640 * MB)
    assert status["ResidentSetSize"] == 140 * 1024  # 640 MiB peak - 500 MiB file
    assert status["ImageSize"] == 140 * 1024
    fs, s = starter(tmp_path / "status2.json", use_peak_memory=True, ignore_cache_memory=False)
    status = measured(fs, s, 5 * MB, 1_000_000, file=500 * MB, peak=640 * MB)
    assert status["ResidentSetSize"] == 5120  # anon + shmem
    assert status["ImageSize"] == 640 * 1024  # memory.peak as it is
