"""The job's block I/O from its cgroup's io.stat, on a kernel with the io controller:
what the starter reports (its status, which execd's job updates carry as
condor_starter's BlockReadKbytes, BlockWriteKbytes, BlockReads, BlockWrites) counts
what the job read and wrote on a block device (a loop device: the guest has no disk)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_starter_limits import run_job

from execd.cgroups.tree import CgroupTree

MIB = 1024


@pytest.fixture
def disk(tmp_path: Path, workdir: Path) -> Iterator[Path]:
    """A directory anyone may write on an ext4 filesystem of its own, on a 32 MiB loop
    device (the guest has no disk of its own: its root is the host's, shared)."""
    backing, mount = tmp_path / "disk.img", workdir / "disk"  # where the job may go
    with backing.open("wb") as f:
        f.truncate(32 * 1024 * 1024)
    subprocess.run(["modprobe", "loop"], check=False)  # a module in Debian's kernel
    made = subprocess.run(["losetup", "--find", "--show", str(backing)],
                          check=False, capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    device = made.stdout.strip()
    try:
        subprocess.run(["mkfs.ext4", "-q", device], check=True)
        mount.mkdir()
        subprocess.run(["mount", device, str(mount)], check=True)
        try:
            os.chmod(mount, 0o1777)
            yield mount
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["losetup", "--detach", device], check=True)


def test_the_io_controller_is_enabled_for_jobs(tree: CgroupTree) -> None:
    assert "io" in tree.controllers


def test_block_io_counts_what_the_job_wrote_and_read(tree: CgroupTree, workdir: Path,
                                                      disk: Path) -> None:  # fmt: skip
    # 8 MiB written and 4 MiB read around the page cache (direct I/O), in 64 KiB blocks
    data = disk / "data.bin"
    script = (f"dd if=/dev/zero of={data} bs=64k count=128 oflag=direct && "
              f"dd if={data} of=/dev/null bs=64k count=64 iflag=direct")  # fmt: skip
    status_path = workdir / "status.json"
    report = run_job(tree, workdir, script, status_path=str(status_path))
    assert report["ExitCode"] == 0, (workdir / "iwd" / "err.txt").read_text()
    status = json.loads(status_path.read_text())  # the final update's measurements
    assert 8 * MIB <= status["BlockWriteKbytes"] < 9 * MIB, status
    assert 4 * MIB <= status["BlockReadKbytes"] < 5 * MIB, status
    assert status["BlockWrites"] >= 128 and status["BlockReads"] >= 64, status
