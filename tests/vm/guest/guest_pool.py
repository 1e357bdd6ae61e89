"""The pool tier's HTCondor pool inside the VM tier's guest, on the guest's cgroup v2.

The host shares the pool tier's chroot read-only (in vm_harness.POOL_GUEST_PATH, named
by EXECD_VM_POOL_CHROOT); here an overlay with a tmpfs upper layer makes it writable, so
the pool harness writes its config, local dir, submitter and /etc/hosts as it does on
the host, and the host's chroot never changes.

Two things differ from the host's pool, both so that HTCondor's own startd enforces
request_memory with the kernel as on a real execute point: the chroot gets the guest's
cgroup v2 at /sys/fs/cgroup (the harness mounts a fresh sysfs, whose cgroup directory
is only a mount point), and the startd keeps its default BASE_CGROUP (the host's pool
turns cgroups off: the host's v1 hierarchies are not ours).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
for extra in (TESTS, TESTS / "pool"):  # tiers and pool_harness, as on the host
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import pool_harness as harness  # noqa: E402 (needs the paths above)
import tiers  # noqa: E402 (needs the paths above)
import user_log_view  # noqa: E402 (needs the paths above)

CGROUP_MOUNT = "/sys/fs/cgroup"
OVERLAY = Path("/run/execd-vm-pool")  # a tmpfs in the guest
ROOT_CONTROLLERS = "+cpu +io +memory +pids"
__all__ = ["CGROUP_MOUNT", "guest_pools", "harness", "user_log_view"]


class GuestPool(harness.Pool):
    """A Pool whose daemons see the guest's cgroup v2 and whose startd uses it."""

    # Software emulation: the daemons' start and their first ads take minutes, not s.
    start_timeout_s = 240

    def config_text(self) -> str:
        lines = super().config_text().splitlines()
        kept = [line for line in lines if line.replace(" ", "") != "BASE_CGROUP="]
        return "\n".join(kept) + "\n"

    def _mount(self) -> None:
        super()._mount()
        target = self.host_path(CGROUP_MOUNT)
        subprocess.run(["mount", "-t", "cgroup2", "cgroup2", str(target)], check=True)
        # What systemd does at boot on a real execute point, and HTCondor expects: the
        # root offers the controllers to the cgroup it creates (BASE_CGROUP).
        (Path(CGROUP_MOUNT) / "cgroup.subtree_control").write_text(ROOT_CONTROLLERS)

    def stop(self) -> None:
        """Stop as on the host, keeping the daemons' logs in the host's results
        directory first (the overlay they are written to ends with the guest)."""
        try:
            results = os.environ.get("EXECD_VM_RESULTS", "")
            logs = self.local_dir / "log"
            if results and logs.is_dir():
                mode = "startd" if self.with_startd else "no-startd"
                keep = Path(results) / f"pool-logs-{mode}"
                shutil.rmtree(keep, ignore_errors=True)
                shutil.copytree(logs, keep)
        finally:
            super().stop()


def writable_chroot() -> Path:
    """The chroot in an overlay the pool may write (mounted once per boot); skips the
    test when the host had no built chroot to share.

    The overlay covers the chroot's directory, not the chroot itself: the pool's lock
    file lies beside the chroot, and the harness unmounts whatever is mounted at or
    below the chroot when it stops.
    """
    shared = os.environ.get("EXECD_VM_POOL_CHROOT", "")
    if not shared:
        why = os.environ.get("EXECD_VM_POOL_WHY_NOT", "the host shared no pool chroot")
        pytest.skip(f"the pool tier cannot run in the guest: {why}")
    lower, name = os.path.split(shared)
    merged = OVERLAY / "merged"
    if not tiers.mounts_under(merged):
        for sub in ("upper", "work", "merged"):
            (OVERLAY / sub).mkdir(parents=True, exist_ok=True)
        layers = f"lowerdir={lower},upperdir={OVERLAY / 'upper'},workdir={OVERLAY / 'work'}"
        subprocess.run(["mount", "-t", "overlay", "-o", layers, "execd-vm-pool", str(merged)],
                       check=True)  # fmt: skip
    return merged / name


def guest_pools() -> harness.RunningPool:
    """The module's one GuestPool (on a writable chroot), restarted only when a test needs
    the other mode."""
    return harness.RunningPool(lambda **mode: GuestPool(writable_chroot(), **mode))
