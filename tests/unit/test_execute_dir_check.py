"""EXECUTE's owner and mode at startup, as condor_startd checks them
(check_execute_dir_perms): execd's own user's and 0755; otherwise the daemon logs
execute_dir_permissions with this reason (and goes on, as condor_startd does)."""

from __future__ import annotations

import os
from pathlib import Path

from execd.daemon.node import Paths


def paths(tmp_path: Path) -> Paths:
    found = Paths(tmp_path / "execute", tmp_path / "spool", tmp_path / "log", tmp_path / "run")
    found.create()
    return found


def test_an_execute_dir_of_execds_user_at_0755_is_fine(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chmod(p.execute, 0o755)
    assert p.execute_problem() is None


def test_a_job_writable_execute_dir_is_named_with_its_risk(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chmod(p.execute, 0o1777)
    assert p.execute_problem() == ("mode 1777, not 0755: jobs could put another directory "
                                   "or a link in place of a sandbox")  # fmt: skip
    os.chmod(p.execute, 0o700)
    assert p.execute_problem() == "mode 0700, not 0755"


def test_an_execute_dir_owned_by_another_user_is_named(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chown(p.execute, 65534, 0)
    assert p.execute_problem() == f"owned by uid 65534, not execd's ({os.geteuid()})"
