"""systemd as PID 1 in the VM, driving a Type=notify service under execd.service's settings.

One boot per session (systemd_harness.boot_and_drive); each test judges one part of what
the guest recorded. The service is a stand-in for `execd run` (systemd_guest/
standin_service.py) under the project's real unit file with only ExecStart replaced.
"""

from __future__ import annotations

from typing import Any

import pytest
import systemd_harness as harness


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


def events(seen: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in seen.get("events", []) if e["event"] == name]


def ok(step: dict[str, Any]) -> bool:
    return step.get("rc") == 0 and not step.get("timed_out")


def test_generated_unit_keeps_execd_service_directives() -> None:
    text = harness.test_unit_text("/bin/true")
    for directive in (
        "Type=notify",
        "Delegate=yes",
        "DelegateSubgroup=daemon",
        "KillMode=process",
        "Restart=on-failure",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ExecStart=/bin/true",
    ):
        assert directive in text.splitlines()
    assert "/usr/bin/execd run" not in text


def test_systemd_is_pid_1_and_drove_every_step(run: harness.SystemdRun) -> None:
    seen = run.observed
    assert seen.get("pid1") == "systemd", run.diagnosis()
    assert seen.get("completed") is True, run.diagnosis()


def test_start_returns_only_after_ready(seen: dict[str, Any]) -> None:
    assert ok(seen["start"]), seen["start"]
    assert seen["after_start"]["ActiveState"] == "active"
    assert seen["after_start"]["SubState"] == "running"
    first_start = events(seen, "started")[0]
    ready = events(seen, "ready_sent")[0]
    assert ready["pid"] == first_start["pid"] == int(seen["after_start"]["MainPID"])
    # `systemctl start` of a Type=notify unit blocks until READY=1 arrived.
    assert seen["start"]["ended"] >= ready["mono"]


def test_reload_returns_and_applies_config(seen: dict[str, Any]) -> None:
    assert ok(seen["reload_good"]), seen["reload_good"]
    assert events(seen, "sighup"), "the service never saw SIGHUP"
    assert events(seen, "reloaded")[0]["config"] == "version-2"
    after = seen["after_reload_good"]
    assert after["ActiveState"] == "active"
    assert after["MainPID"] == seen["after_start"]["MainPID"]
    assert "version-2" in after["StatusText"]


def test_rejected_reload_keeps_service_running_on_old_config(seen: dict[str, Any]) -> None:
    assert ok(seen["reload_bad"]), seen["reload_bad"]
    assert events(seen, "reload_rejected")[0]["config"] == "version-2"
    after = seen["after_reload_bad"]
    assert after["ActiveState"] == "active"
    assert after["MainPID"] == seen["after_start"]["MainPID"]
    assert "rejected" in after["StatusText"]


def systemd_version(seen: dict[str, Any]) -> int:
    """From `systemctl --version`'s first line: `systemd 252 (252.39-1~deb12u2)`."""
    return int(str(seen["systemd_version"]).split()[1])


def test_watchdog_kills_hung_service(seen: dict[str, Any]) -> None:
    assert ok(seen["start_again"]), seen["start_again"]
    assert events(seen, "hanging"), "the stand-in never stopped pinging"
    hung = events(seen, "hanging")[0]["pid"]
    assert "execd-standin.service: Watchdog timeout" in seen["journal"]
    assert f"Killing process {hung} " in seen["journal"]


def test_watchdog_restart_brings_service_back(seen: dict[str, Any]) -> None:
    if systemd_version(seen) < 254:
        # Measured on Debian 12 (systemd 252): DelegateSubgroup= is ignored, so the new
        # main process goes to the unit's own cgroup, where the daemon had enabled
        # controllers for its jobs: exec fails with 219/CGROUP until Restart= gives up.
        # Once the guest's systemd honours DelegateSubgroup=, the assertions below apply.
        assert "status=219/CGROUP" in seen["journal"]
        pytest.xfail("systemd < 254 ignores DelegateSubgroup=: a restart fails 219/CGROUP")
    assert seen["restarted"] is True, seen["after_restart"]
    after = seen["after_restart"]
    assert int(after["NRestarts"]) >= 1
    assert after["MainPID"] != seen["after_start_again"]["MainPID"]
    assert len(events(seen, "ready_sent")) >= 3


def test_stop_signals_main_process_only(seen: dict[str, Any]) -> None:
    assert ok(seen["stop"]), seen["stop"]
    assert seen["after_stop"]["ActiveState"] == "inactive"
    assert events(seen, "sigterm"), "the service never saw SIGTERM"
    # KillMode=process: the jobs the daemon started are its to end, not systemd's.
    assert seen["job_pids_alive_after_stop"]
    assert all(seen["job_pids_alive_after_stop"].values())


def test_service_runs_in_delegated_daemon_leaf_with_job_cgroup_beside(
    seen: dict[str, Any],
) -> None:
    unit_cgroup = seen["after_start"]["ControlGroup"]
    assert seen["after_start"]["Delegate"] == "yes"
    assert unit_cgroup.endswith(f"/{harness.TEST_UNIT}")
    assert seen["main_pid_cgroup"] == f"0::{unit_cgroup}/daemon"
    cgroups = events(seen, "cgroups")[0]
    if systemd_version(seen) >= 254:  # DelegateSubgroup=daemon put it there itself
        assert cgroups["started_in"].endswith(f"{unit_cgroup}/daemon")
    assert cgroups["daemon"].endswith(f"{unit_cgroup}/daemon")
    assert cgroups["job"].startswith(f"/sys/fs/cgroup{unit_cgroup}/job-")
    assert set(cgroups["job_controllers"]) >= {"memory", "cpu", "pids"}
    assert cgroups["job_procs"] == [str(cgroups["job_pid"])]
