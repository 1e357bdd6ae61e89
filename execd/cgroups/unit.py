"""After the daemon's main process is gone: leave its systemd unit restartable.

systemd < 254 ignores `DelegateSubgroup=` and starts a (re)started main process in the
unit's own cgroup. The daemon had enabled controllers there for its jobs' slices, and
the kernel refuses a process in a cgroup that hands controllers to its children
("no internal processes"): the restart fails with status=219/CGROUP. `ExecStopPost=`
runs in the unit's `.control` subgroup once the main process has ended and clears the
controllers execd enabled, so Restart=on-failure can bring the daemon back; the new
daemon moves itself into its leaf and enables them again.

Jobs that outlived a crash (KillMode=process) run without kernel-enforced limits from
then until they end; systemd >= 254 needs none of this and keeps them, unless no job
is left.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from execd.cgroups.discovery import Hierarchy, is_delegated, own_cgroup
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import DAEMON_LEAF, EXECD_CONTROLLERS, parse_flat_keyed

CONTROL_SUBGROUP = ".control"  # where systemd runs a delegated unit's control processes


def unit_cgroup_of_control_process(hierarchy: Hierarchy, proc_self_cgroup: str) -> Path | None:
    """The delegated unit cgroup above this `ExecStopPost=` process, or None."""
    own = PurePosixPath(own_cgroup(proc_self_cgroup))
    unit = own.parent if own.name == CONTROL_SUBGROUP else own
    path = hierarchy.mount / str(unit).lstrip("/")
    return path if str(unit).strip("/") and is_delegated(path) else None


def jobs_left(fs: CgroupFS, unit: Path) -> int:
    """How many job slices under the unit still hold processes."""
    left = 0
    for name in fs.children(unit):
        if name in (DAEMON_LEAF, CONTROL_SUBGROUP):
            continue
        events = parse_flat_keyed(fs.read(unit / name / "cgroup.events"))
        left += events.get("populated") == 1
    return left


def release_controllers(fs: CgroupFS, unit: Path, *, delegate_subgroup_honoured: bool) -> str:
    """Clear the controllers execd enabled in the unit's subtree_control; says what it did."""
    control = unit / "cgroup.subtree_control"
    enabled = [c for c in fs.read(control).split() if c in EXECD_CONTROLLERS]
    if not enabled:
        return f"{unit}: no controllers to release"
    left = jobs_left(fs, unit)
    if delegate_subgroup_honoured and left:
        return f"{unit}: kept {' '.join(enabled)} for {left} running job(s)"
    fs.write(control, " ".join(f"-{c}" for c in enabled))
    return f"{unit}: released {' '.join(enabled)} ({left} job(s) still running)"
