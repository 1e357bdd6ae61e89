"""EXECUTE's owner and mode at startup, as condor_startd checks them
(check_execute_dir_perms): root's, execd's own user's or the condor account's, and 0755;
otherwise the daemon logs execute_dir_permissions with this reason (and goes on, as
condor_startd does)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.node import Paths, condor_uid


def paths(tmp_path: Path) -> Paths:
    found = Paths(tmp_path / "execute", tmp_path / "spool", tmp_path / "log", tmp_path / "run")
    found.create()
    return found


def test_an_execute_dir_of_execds_user_at_0755_is_fine(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chmod(p.execute, 0o755)
    assert p.execute_problem() is None


def test_a_stock_condor_execute_dir_is_fine(tmp_path: Path) -> None:
    # /var/lib/condor/execute on a node that ran condor_startd: condor:condor, 0755.
    p = paths(tmp_path)
    os.chown(p.execute, 4242, 4242)
    assert p.execute_problem(condor_uid=4242) is None


def test_the_condor_account_is_condor_ids_else_the_condor_user(tmp_path: Path) -> None:
    def uid(text: str) -> int | None:
        return condor_uid(load_settings(parse_config_text(text)))

    assert uid("CONDOR_IDS = 4242.4243\n") == 4242
    try:
        expected: int | None = pwd.getpwnam("condor").pw_uid
    except KeyError:
        expected = None
    assert uid("") == expected


def test_a_job_writable_execute_dir_is_named_with_its_risk(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chmod(p.execute, 0o1777)
    assert p.execute_problem() == ("mode 1777, not 0755; jobs could put another directory "
                                   "or a link in place of a sandbox")  # fmt: skip
    os.chmod(p.execute, 0o775)  # group-writable is as dangerous
    assert p.execute_problem() == ("mode 0775, not 0755; jobs could put another directory "
                                   "or a link in place of a sandbox")  # fmt: skip
    os.chmod(p.execute, 0o700)
    assert p.execute_problem() == "mode 0700, not 0755"


def test_a_condor_owned_world_writable_execute_dir_still_names_the_risk(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chown(p.execute, 4242, 4242)
    os.chmod(p.execute, 0o1777)
    assert p.execute_problem(condor_uid=4242) == (
        "mode 1777, not 0755; jobs could put another directory or a link in place of a sandbox")
    owners = ", ".join(str(uid) for uid in sorted({0, os.geteuid()}))
    assert p.execute_problem(condor_uid=None) == (
        f"owned by uid 4242, not root, execd's or condor's ({owners}); "
        "mode 1777, not 0755; jobs could put another directory or a link in place of a sandbox")


def test_an_execute_dir_owned_by_another_user_is_named(tmp_path: Path) -> None:
    p = paths(tmp_path)
    os.chown(p.execute, 65534, 0)
    assert p.execute_problem() == "owned by uid 65534, not root, execd's or condor's (0)"
