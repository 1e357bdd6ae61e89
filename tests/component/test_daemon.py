"""`execd run` as a real process: startup, live status, reload, signals, shutdown."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import RunningDaemon


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    running = RunningDaemon(tmp_path).start()
    yield running
    running.stop(signal.SIGQUIT)


def test_starts_publishes_slots_and_answers_status(daemon: RunningDaemon) -> None:
    started = daemon.events()[-1]
    assert started["slots"] == ["slot1"]
    changed = [e for e in daemon.events() if e["event"] == "slot_state_changed"]
    assert changed[0]["old"] == "Owner/Idle"
    assert changed[0]["new"] == "Unclaimed/Idle"
    done = daemon.execd("status", "-af", "Name", "State", "Activity", "PartitionableSlot")
    assert done.returncode == 0, done.stderr
    name, state, activity, partitionable = done.stdout.split()
    assert name.startswith("slot1@")
    assert (state, activity, partitionable) == ("Unclaimed", "Idle", "true")


def test_status_constraint_is_evaluated_by_the_daemon(daemon: RunningDaemon) -> None:
    done = daemon.execd("status", "-af", "Name", "-constraint", 'State == "Claimed"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    bad = daemon.execd("status", "-constraint", "State ==")
    assert bad.returncode == 1
    assert "error" in bad.stderr


def test_sighup_applies_a_good_config(daemon: RunningDaemon) -> None:
    extra = 'favorite_color = "blue"\nSTARTD_ATTRS = favorite_color\n'
    daemon.config.write_text(daemon.config_text(extra))
    daemon.send(signal.SIGHUP)
    applied = daemon.wait_for("reconfig_applied")
    assert "favorite_color" in applied["changed"]
    done = daemon.execd("status", "-af", "favorite_color")
    assert done.stdout.strip() == "blue"


def test_sighup_with_a_bad_config_keeps_the_old_one(daemon: RunningDaemon) -> None:
    good = daemon.config.read_text()
    daemon.config.write_text(good + "START = (KeyboardIdle >\n")
    daemon.send(signal.SIGHUP)
    rejected = daemon.wait_for("reconfig_rejected")
    assert f"{daemon.config}:" in rejected["error"]
    assert "START" in rejected["error"]
    done = daemon.execd("status", "-af", "State")
    assert done.returncode == 0
    assert done.stdout.strip() == "Unclaimed"


@pytest.mark.parametrize("line", ["NUM_CPUS = $INT(1e400)", "NUM_CPUS = $INT(2,%99999999999d)",
                                  'NUM_CPUS = $SUBSTR(NUM_X,1e400)\nNUM_X = "12"'])
def test_sighup_with_a_macro_python_cannot_compute_keeps_the_old_config(
    daemon: RunningDaemon, line: str
) -> None:
    """A number too big for an int, a field too wide to format: a ConfigError naming the
    macro, not an exception that ends the daemon."""
    daemon.config.write_text(daemon.config.read_text() + line + "\n")
    daemon.send(signal.SIGHUP)
    rejected = daemon.wait_for("reconfig_rejected")
    assert line.split("= ")[1].partition("\n")[0] in rejected["error"]
    done = daemon.execd("status", "-af", "State")
    assert (done.returncode, done.stdout.strip()) == (0, "Unclaimed")


def test_reconfig_over_the_socket(daemon: RunningDaemon) -> None:
    from execd.daemon.client import ControlClient

    with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
        assert client.call("reconfig") == {"reloaded": True}
        assert client.call("ping")["reloads"] == 1


def test_sigusr1_reopens_the_log(daemon: RunningDaemon) -> None:
    moved = daemon.log.with_name("ExecdLog.1")
    daemon.log.rename(moved)
    daemon.send(signal.SIGUSR1)
    daemon._offset = 0
    daemon.wait_for("signal_received", request="reopen_logs")
    assert daemon.log.exists()


def test_sigterm_is_a_graceful_shutdown(daemon: RunningDaemon) -> None:
    assert daemon.stop(signal.SIGTERM) == 0
    assert daemon.wait_for("shutdown_requested")["how"] == "graceful"
    assert daemon.wait_for("execd_stopped")
    assert not (daemon.root / "state" / "log" / "execd.sock").exists()


def test_a_second_daemon_is_refused(daemon: RunningDaemon) -> None:
    second = daemon.execd("run", timeout=30)
    assert second.returncode == 3
    assert f"already running (pid {daemon.proc.pid if daemon.proc else ''}" in second.stderr


def test_bad_config_at_startup_exits_nonzero_naming_file_and_line(tmp_path: Path) -> None:
    bad = RunningDaemon(tmp_path, "PREEMPT = ((\n")
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"{bad.config}:" in done.stderr
    assert "PREEMPT" in done.stderr


def test_unwritable_execute_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = RunningDaemon(tmp_path, f"EXECUTE = {blocker}/execute\n")
    done = bad.execd("run", timeout=30)
    assert done.returncode == 2
    assert f"EXECUTE directory {blocker}/execute" in done.stderr


def test_status_without_a_daemon_suggests_local(tmp_path: Path) -> None:
    idle = RunningDaemon(tmp_path)
    done = idle.execd("status")
    assert done.returncode == 1
    assert "execd is not running" in done.stderr
    assert "--local" in done.stderr
    assert os.path.exists(idle.config)


def test_a_hundred_sighups_leak_nothing(daemon: RunningDaemon) -> None:
    from execd.daemon.client import ControlClient

    socket_path = daemon.root / "state" / "log" / "execd.sock"
    with ControlClient(socket_path) as client:
        before = client.call("ping")
    for _ in range(100):
        daemon.send(signal.SIGHUP)
        daemon.wait_for("reconfig_applied")
    with ControlClient(socket_path) as client:
        after = client.call("ping")
        status = client.call("status")
    assert after["reloads"] == before["reloads"] + 100
    assert after["fds"] == before["fds"]
    assert after["tasks"] == before["tasks"]
    assert [ad["State"] for ad in status["ads"]] == ["Unclaimed"]


def test_startd_cron_values_reach_ads_and_policy(tmp_path: Path) -> None:
    hook = tmp_path / "temperature.sh"
    hook.write_text("#!/bin/sh\necho 'Temperature = 42'\necho 'Rack = \"r12\"'\n")
    hook.chmod(0o755)
    extra = (
        f"STARTD_CRON_JOBLIST = TEMP\nSTARTD_CRON_TEMP_EXECUTABLE = {hook}\n"
        "STARTD_CRON_TEMP_MODE = Periodic\nSTARTD_CRON_TEMP_PERIOD = 1s\n"
        "START = MY.Temperature =!= undefined && MY.Temperature < 40\n"
    )
    daemon = RunningDaemon(tmp_path, extra).start()
    from execd.daemon.client import ControlClient
    from execd.daemon.control import ControlError

    try:
        with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
            deadline = time.monotonic() + 30
            ad: dict[str, object] = {}
            while "Temperature" not in ad and time.monotonic() < deadline:
                ad = client.call("status")["ads"][0]  # the hook runs every second
            assert ad["Temperature"] == 42
            assert ad["Rack"] == "r12"
            assert isinstance(ad["LastUpdate"], int)  # <prefix>LastUpdate, no prefix set
            # the policy saw it at once: START is false at 42 degrees, so a claim is refused
            with pytest.raises(ControlError, match="START is not true"):
                client.call("request_claim", {"job": {"RequestCpus": 1}})
    finally:
        daemon.stop(signal.SIGQUIT)
