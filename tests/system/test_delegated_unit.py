"""Under a systemd-delegated cgroup (trusted.delegate=1), the unit's cgroup is execd's base.

systemd itself is exercised in tests/vm/test_systemd_service.py; here a cgroup marked as
systemd marks a `Delegate=yes` unit's stands in for one, on the real v2 hierarchy.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.cgroups.discovery import discover
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from tests.component.daemon_harness import RunningDaemon


@pytest.fixture
def unit() -> Iterator[Path]:
    """A cgroup at the top of the hierarchy, delegated the way systemd marks it."""
    hierarchy = discover(CgroupFS())
    name = f"execd-test-{os.getpid()}-{secrets.token_hex(4)}.service"
    path = hierarchy.mount / name
    path.mkdir()
    os.setxattr(path, "trusted.delegate", b"1")
    try:
        yield path
    finally:
        CgroupTree(CgroupFS(), hierarchy, name).remove()


def in_cgroup(cgroup: Path, argv: list[str]) -> list[str]:
    """argv, run after moving itself into CGROUP (as systemd starts a unit's process)."""
    return ["sh", "-c", f'echo $$ > "{cgroup}/cgroup.procs" && exec "$@"', "sh", *argv]


def test_daemon_in_a_delegated_unit_puts_jobs_below_it(unit: Path, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    node = RunningDaemon(tmp_path, "NUM_CPUS = 1\nMEMORY = 512\n")
    node.proc = subprocess.Popen(
        in_cgroup(unit, [sys.executable, "-m", "execd", "--config", str(node.config), "run"]),
        env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = node.wait_for("cgroup_tree_ready")
        assert ready["base"] == str(unit)  # not BASE_CGROUP: the unit's own cgroup
        node.wait_for("execd_started")
        relative = "/" + str(unit.relative_to(discover(CgroupFS()).mount))
        daemon_cgroup = Path(f"/proc/{node.proc.pid}/cgroup").read_text()
        assert f"0::{relative}/daemon\n" in daemon_cgroup
        done = node.execd("job", "--", "grep", "^0::", "/proc/self/cgroup")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"0::{relative}/slot1_1.slice/job"
    finally:
        node.proc.send_signal(signal.SIGQUIT)
        node.proc.communicate(timeout=60)
    assert not (unit.parent / node.base_cgroup).exists()  # BASE_CGROUP was not used


def test_service_stopped_finds_the_unit_from_its_control_subgroup(unit: Path) -> None:
    tree = CgroupTree(CgroupFS(), discover(CgroupFS()), unit.name)
    tree.enable_controllers(unit)  # as the daemon did for its jobs (none on a hybrid host)
    control = unit / ".control"  # where systemd runs ExecStopPost= of a delegated unit
    control.mkdir()
    argv = [sys.executable, "-m", "execd", "service-stopped"]
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get(
        "PYTHONPATH")]))}
    done = subprocess.run(in_cgroup(control, argv), env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    if tree.controllers:  # a pure v2 host: what execd enabled is released
        assert done.stdout.startswith(f"execd service-stopped: {unit}: released")
        assert (unit / "cgroup.subtree_control").read_text().split() == []
    else:  # this CI machine's controller-less v2: nothing was ever enabled
        assert done.stdout.strip() == f"execd service-stopped: {unit}: no controllers to release"
