"""The job's resident set on a kernel with the memory controller, as condor_starter 25.x
measures it on cgroup v2 (memory.stat's anon + shmem): a job that writes 300 MiB of
files while it holds 32 MiB of its own memory reports about 32 MiB (and the
interpreter's few MiB), not the page cache of its files, which memory.current counts.

The files go to an ext4 on a RAM disk (brd): the guest has no disk, and a file on its
tmpfs would be shmem (the job's memory, rightly), not page cache. brd's own pages are
charged to no cgroup; the page cache of the files written on it is the job's."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_starter_limits import run_job

from execd.cgroups.tree import CgroupTree

MIB = 1024 * 1024
HELD_MIB = 32
WRITTEN_MIB = 300
# The job: hold 32 MiB (touched), write 300 MiB in 1 MiB pieces (no fsync: the page
# cache stays), say what its cgroup's files say, then stay a while so that the starter
# measures it after the writes (polling_interval 0.5 s).
JOB = f"""
import os, sys, time
held = b"h" * ({HELD_MIB} * {MIB})  # written: resident
chunk = b"x" * {MIB}
with open(os.path.join(sys.argv[1], "data.bin"), "wb") as f:
    for _ in range({WRITTEN_MIB}):
        f.write(chunk)
job = "/sys/fs/cgroup" + open("/proc/self/cgroup").read().split("::")[1].strip()
seen = {{name: open(job + "/../" + name).read() for name in ("memory.current", "memory.stat")}}
print(__import__("json").dumps(seen))
time.sleep(3)
"""


@pytest.fixture
def ram_disk(workdir: Path) -> Iterator[Path]:
    """A directory anyone may write on an ext4 filesystem of its own on a 512 MiB RAM
    disk (/dev/ram0)."""
    loaded = subprocess.run(["modprobe", "brd", "rd_nr=1", f"rd_size={512 * 1024}"],
                            check=False, capture_output=True, text=True)  # fmt: skip
    assert loaded.returncode == 0, f"no brd RAM disk in this kernel: {loaded.stderr}"
    mount = workdir / "ram"
    try:
        subprocess.run(["mkfs.ext4", "-q", "/dev/ram0"], check=True)
        mount.mkdir()
        subprocess.run(["mount", "/dev/ram0", str(mount)], check=True)
        try:
            mount.chmod(0o1777)
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["rmmod", "brd"], check=False)


def test_resident_set_is_the_jobs_memory_not_its_files_page_cache(
    tree: CgroupTree, workdir: Path, ram_disk: Path
) -> None:
    status_path = workdir / "status.json"
    report = run_job(tree, workdir, "", cmd="/usr/bin/python3", args=["-c", JOB, str(ram_disk)],
                     memory_mb=1024, status_path=str(status_path))  # fmt: skip
    assert report["ExitCode"] == 0, (workdir / "iwd" / "err.txt").read_text()
    seen = json.loads((workdir / "iwd" / "out.txt").read_text())
    stat = dict(line.split() for line in seen["memory.stat"].splitlines())
    # what the old measure (memory.current) said: the files' page cache and the buffer
    assert int(seen["memory.current"]) >= (WRITTEN_MIB + HELD_MIB) * MIB, seen
    assert int(stat["file"]) >= WRITTEN_MIB * MIB, stat
    status = json.loads(status_path.read_text())  # the final update's measurements
    if os.environ.get("EXECD_VM_RESULTS"):  # what was measured, for a person to read
        observed = {"memory.current": seen["memory.current"].strip(), "file": stat["file"],
                    "anon": stat["anon"], "report": report, "status": status}  # fmt: skip
        Path(os.environ["EXECD_VM_RESULTS"], "resident-set.json").write_text(
            json.dumps(observed, indent=1, default=str))
    for measured in (report, status):
        for name in ("ResidentSetSize", "ImageSize"):  # KiB
            assert HELD_MIB * 1024 <= int(measured[name]) <= (HELD_MIB + 64) * 1024, (
                name, measured[name], stat)
    assert HELD_MIB <= int(report["MemoryUsage"]) <= HELD_MIB + 64
