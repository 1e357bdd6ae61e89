"""Where the cgroup v2 hierarchy is mounted and which controllers it offers.

A pure v2 host mounts it at /sys/fs/cgroup with controllers; a hybrid host (this CI
machine) mounts a controller-less v2 at /sys/fs/cgroup/unified. Both give tracking,
freezing and killing; only the first gives kernel-enforced limits.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import NamedTuple

from execd.cgroups.fs import CgroupFS
from execd.errors import CgroupError

MOUNTS = Path("/proc/self/mounts")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


class Hierarchy(NamedTuple):
    """The v2 mount and the controllers available at its root."""

    mount: Path
    controllers: frozenset[str]

    @property
    def has_limits(self) -> bool:
        return "memory" in self.controllers


def find_cgroup2_mount(mounts_text: str) -> Path | None:
    """The cgroup2 mount point named in /proc/self/mounts text, preferring /sys/fs/cgroup."""
    found = [
        Path(fields[1])
        for fields in (line.split() for line in mounts_text.splitlines())
        if len(fields) >= 3 and fields[2] == "cgroup2"
    ]
    if not found:
        return None
    found.sort(key=lambda p: (p != Path("/sys/fs/cgroup"), str(p)))
    return found[0]


def discover(fs: CgroupFS, mounts_text: str | None = None) -> Hierarchy:
    """Find the v2 hierarchy; raise CgroupError when the host has none."""
    text = mounts_text if mounts_text is not None else fs.read(MOUNTS)
    mount = find_cgroup2_mount(text)
    if mount is None:
        raise CgroupError(f"no cgroup2 hierarchy is mounted (read {MOUNTS})")
    controllers = frozenset(fs.read(mount / "cgroup.controllers").split())
    return Hierarchy(mount=mount, controllers=controllers)


def own_cgroup(proc_self_cgroup: str) -> str:
    """This process's v2 cgroup path (the `0::` line) relative to the mount."""
    for line in proc_self_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:]
    raise CgroupError("/proc/self/cgroup has no cgroup v2 (0::) line")


# systemd marks a cgroup it delegates with this extended attribute (value "1").
DELEGATION_XATTRS = ("trusted.delegate", "user.delegate")


def is_delegated(cgroup_dir: Path) -> bool:
    """Whether systemd delegated this cgroup (Delegate=yes) to the process inside."""
    import os  # noqa: PLC0415

    for name in DELEGATION_XATTRS:
        try:
            if os.getxattr(cgroup_dir, name) == b"1":
                return True
        except OSError:
            continue
    return False


def delegated_unit_cgroup(hierarchy: Hierarchy, proc_self_cgroup: str,
                          daemon_leaf: str = "daemon") -> str | None:
    """The delegated systemd unit cgroup this process runs in, relative to the mount.

    Under `Delegate=yes` the unit's cgroup is ours: systemd >= 254 starts the daemon in
    its `DelegateSubgroup=daemon` leaf, older systemd (which ignores that setting) in the
    unit's cgroup itself. None when this process is not in a delegated cgroup.
    """
    own = PurePosixPath(own_cgroup(proc_self_cgroup))
    candidates = [own.parent, own] if own.name == daemon_leaf else [own]
    for candidate in candidates:
        relative = str(candidate).lstrip("/")
        if relative and is_delegated(hierarchy.mount / relative):
            return relative
    return None
