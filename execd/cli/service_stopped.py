"""`execd service-stopped`: systemd's ExecStopPost=, so that a restart can work.

See execd.cgroups.unit for why; outside a delegated unit it does nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from execd.cgroups.discovery import PROC_SELF_CGROUP, discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.unit import release_controllers, unit_cgroup_of_control_process
from execd.errors import CgroupError

FIRST_WITH_DELEGATE_SUBGROUP = 254


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "service-stopped",
        help="ExecStopPost= of execd.service: leave the unit's cgroup restartable",
        description="Run by systemd after execd's main process ended (ExecStopPost=). On "
        "systemd < 254 it clears the cgroup controllers execd enabled in its unit's "
        "cgroup, without which Restart= fails with status=219/CGROUP.",
    )
    parser.set_defaults(func=run)


def systemd_version() -> int:
    """The running systemd's version from `systemctl --version` (0 when unknown)."""
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        return 0
    try:
        out = subprocess.run([systemctl, "--version"], capture_output=True, text=True,
                             timeout=30, check=False).stdout.split()
        return int(out[1]) if len(out) > 1 and out[1].isdigit() else 0
    except (OSError, subprocess.SubprocessError):
        return 0


def run(_args: argparse.Namespace) -> int:
    try:
        fs = CgroupFS()
        hierarchy = discover(fs)
        unit = unit_cgroup_of_control_process(hierarchy, fs.read(PROC_SELF_CGROUP))
        if unit is None:
            print("execd service-stopped: not in a delegated unit; nothing to do")
            return 0
        honoured = systemd_version() >= FIRST_WITH_DELEGATE_SUBGROUP
        done = release_controllers(fs, unit, delegate_subgroup_honoured=honoured)
        print(f"execd service-stopped: {done}")
    except CgroupError as exc:
        print(f"execd service-stopped: {exc}", file=sys.stderr)
        return 1
    return 0
