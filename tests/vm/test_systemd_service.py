"""systemd as PID 1 in the VM, running the real `execd run` under systemd/execd.service.

One boot per session (systemd_harness.boot_and_drive); the guest's driver
(systemd_guest/drive_service.py) starts, reloads, stops and hangs the daemon and records
what it saw; each test judges one part of it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import systemd_harness as harness

UNIT = harness.TEST_UNIT


@pytest.fixture(scope="session")
def run() -> harness.SystemdRun:
    return harness.boot_and_drive(harness.fresh_results_dir())


@pytest.fixture
def seen(run: harness.SystemdRun) -> dict[str, Any]:
    if run.timed_out:
        pytest.fail(f"the VM did not finish in {harness.BOOT_TIMEOUT_S} s\n{run.diagnosis()}")
    if not run.observed:
        pytest.fail(f"the guest recorded nothing\n{run.diagnosis()}")
    return run.observed


def ok(step: dict[str, Any]) -> bool:
    return step.get("rc") == 0 and not step.get("timed_out")


def journal_events(seen: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """execd's JSON log lines (EXECD_LOG = -: stderr, i.e. the journal) named NAME."""
    found = []
    for line in str(seen.get("journal", "")).splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            event = json.loads(line[start:])
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("event") == name:
            found.append(event)
    return found


def systemd_version(seen: dict[str, Any]) -> int:
    """From `systemctl --version`'s first line: `systemd 252 (252.39-1~deb12u2)`."""
    return int(str(seen["systemd_version"]).split()[1])


def test_installed_unit_runs_the_checkouts_execd() -> None:
    text = harness.test_unit_text("/venv/bin/execd")
    lines = text.splitlines()
    for directive in (
        "Type=notify",
        "Delegate=yes",
        "DelegateSubgroup=daemon",
        "KillMode=process",
        "Restart=on-failure",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ExecStart=/venv/bin/execd run",
        "ExecStopPost=-/venv/bin/execd service-stopped",
    ):
        assert directive in lines
    assert "/usr/bin/execd" not in text


def test_systemd_is_pid_1_and_drove_every_step(run: harness.SystemdRun) -> None:
    seen = run.observed
    assert seen.get("pid1") == "systemd", run.diagnosis()
    assert seen.get("completed") is True, run.diagnosis()


def test_start_returns_once_slots_are_published(seen: dict[str, Any]) -> None:
    assert ok(seen["start"]), seen["start"]
    assert seen["after_start"]["ActiveState"] == "active"
    assert seen["after_start"]["SubState"] == "running"
    # READY=1 only once the slots are published: the first `execd status` after
    # `systemctl start` returned already lists the partitionable slot.
    status = seen["status_right_after_start"]
    assert ok(status), status
    assert re.fullmatch(r"slot1@\S+ 1", status["out"].strip()), status["out"]
    started = journal_events(seen, "execd_started")
    assert started and started[0]["slots"] == ["slot1"]


def test_systemctl_status_shows_the_status_line(seen: dict[str, Any]) -> None:
    assert seen["after_start"]["StatusText"] == "1 slot, 0 claimed"
    assert 'Status: "1 slot, 0 claimed"' in seen["systemctl_status"]["out"]


def test_reload_applies_a_good_config(seen: dict[str, Any]) -> None:
    assert ok(seen["reload_good"]), seen["reload_good"]
    # `systemctl reload` waits for READY=1 after RELOADING=1; it came back in time
    assert seen["reload_good"]["ended"] - seen["reload_good"]["began"] < 60
    assert seen["status_after_reload_good"]["out"].strip() == "2"
    after = seen["after_reload_good"]
    assert after["ActiveState"] == "active"
    assert after["MainPID"] == seen["after_start"]["MainPID"]
    assert journal_events(seen, "reconfig_applied")


def test_bad_reload_keeps_the_old_config_and_names_file_and_line(seen: dict[str, Any]) -> None:
    assert ok(seen["reload_bad"]), seen["reload_bad"]
    assert seen["status_after_reload_bad"]["out"].strip() == "2"  # not 3: nothing applied
    after = seen["after_reload_bad"]
    assert after["ActiveState"] == "active"
    assert after["MainPID"] == seen["after_start"]["MainPID"]
    assert after["StatusText"].startswith("reconfig rejected, old config kept")
    (rejected,) = journal_events(seen, "reconfig_rejected")
    where = f"{harness.RESULTS_DIR / 'execd_config'}:{11}:"
    assert rejected["error"].startswith(where), rejected


def test_job_cgroup_is_under_the_services_delegated_tree(seen: dict[str, Any]) -> None:
    unit_cgroup = seen["after_start"]["ControlGroup"]
    assert unit_cgroup.endswith(f"/{UNIT}")
    assert seen["after_start"]["Delegate"] == "yes"
    # the daemon lives in its leaf (moved there itself on systemd < 254)
    assert seen["main_pid_cgroup"] == f"0::{unit_cgroup}/daemon"
    job = seen["job"]
    assert ok(job), job
    cgroup, user, controllers = job["out"].splitlines()
    assert cgroup == f"{unit_cgroup}/slot1_1.slice/job"
    assert user == "nobody"
    assert set(controllers.split()) >= {"memory", "cpu", "pids"}


def test_stop_ends_the_jobs_and_the_unit(seen: dict[str, Any]) -> None:
    assert seen["long_job_started"] is True, seen["long_job_pids"]
    assert seen["status_with_job"]["StatusText"] == "2 slots, 1 claimed"  # slot1, slot1_1
    assert ok(seen["stop"]), seen["stop"]
    assert seen["after_stop"]["ActiveState"] == "inactive"
    assert seen["long_job_pids"]
    assert not any(seen["long_job_pids_alive_after_stop"].values())
    assert seen["job_slice_exists_after_stop"] is False
    assert journal_events(seen, "shutdown_requested")[0]["how"] == "graceful"
    assert seen["long_job_client"]["rc"] not in (None, 0), seen["long_job_client"]


def test_watchdog_restarts_a_hung_daemon(seen: dict[str, Any]) -> None:
    assert ok(seen["start_again"]), seen["start_again"]
    assert ok(seen["hang"]), seen["hang"]
    hung = seen["after_start_again"]["MainPID"]
    assert f"{UNIT}: Watchdog timeout" in seen["journal"]
    assert seen["restarted"] is True, (seen["after_restart"], seen["journal"][-3000:])
    after = seen["after_restart"]
    assert int(after["NRestarts"]) >= 1
    assert after["MainPID"] != hung
    assert seen["first_pid_gone"] is True
    # the new daemon serves, with the config on disk
    assert re.fullmatch(r"slot1@\S+ 2", seen["status_after_restart"]["out"].strip())
    if systemd_version(seen) < 254:
        # ExecStopPost= cleared the controllers, or the restart fails 219/CGROUP
        assert "status=219/CGROUP" not in seen["journal"]


def test_final_stop_leaves_the_unit_inactive(seen: dict[str, Any]) -> None:
    assert ok(seen["final_stop"]), seen["final_stop"]
    assert seen["after_final_stop"]["ActiveState"] == "inactive"


def test_bad_config_at_startup_fails_the_start_and_the_journal_says_why(
    seen: dict[str, Any],
) -> None:
    assert seen["start_bad"]["rc"] not in (None, 0), seen["start_bad"]
    after = seen["after_start_bad"]
    assert after["ActiveState"] == "failed"
    assert after["ExecMainStatus"] == "2"
    # RestartPreventExitStatus=2: no restart loop (an explicit start may reset the count)
    assert int(after["NRestarts"]) <= int(seen["after_final_stop"]["NRestarts"])
    where = f"{harness.RESULTS_DIR / 'execd_config'}:11: expected 'NAME = value'"
    assert where in seen["status_after_start_bad"]["out"]
