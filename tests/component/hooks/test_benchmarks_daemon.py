"""RUNBENCHMARKS through a real daemon: Unclaimed/Benchmarking (3, 4) and the slot ads."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import RunningDaemon


def slot_ad(daemon: RunningDaemon) -> dict[str, Any]:
    with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
        ad: dict[str, Any] = client.call("status")["ads"][0]
        return ad


def transitions(daemon: RunningDaemon) -> list[tuple[str, str]]:
    return [(e["new"], e["transition"]) for e in daemon.events()
            if e.get("event") == "slot_state_changed"]


def test_runbenchmarks_runs_once_and_publishes_mips_kflops(tmp_path: Path) -> None:
    # the manual's example: run when the last run is older than an hour (LastBenchmark
    # starts at 0). Defined and not False, so one run also happens at startup; the
    # policy's request arrives while it runs and is answered by it.
    extra = "RUNBENCHMARKS = (time() - LastBenchmark) >= 3600\nUPDATE_INTERVAL = 1\n"
    daemon = RunningDaemon(tmp_path, extra).start()
    try:
        finished = daemon.wait_for("benchmarks_finished", timeout=60)
        assert finished["mips"] > 0 and finished["kflops"] > 0
        daemon.wait_for("slot_state_changed", new="Unclaimed/Idle", transition="4")
        ad = slot_ad(daemon)
        assert ad["Mips"] == finished["mips"]
        assert ad["KFlops"] == finished["kflops"]
        assert abs(ad["LastBenchmark"] - time.time()) < 60
        assert ("Unclaimed/Benchmarking", "3") in transitions(daemon)
        # the expression is now false: the next passes (every second) leave it Idle
        before = len(transitions(daemon))
        with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
            client.call("reconfig")  # forces a policy pass at once
        daemon.wait_for("reconfig_applied")
        assert len(transitions(daemon)) == before
        assert slot_ad(daemon)["Activity"] == "Idle"
        assert [e["event"] for e in daemon.events()].count("benchmarks_finished") == 1
    finally:
        daemon.stop(signal.SIGQUIT)


def test_runbenchmarks_false_never_runs_them(tmp_path: Path) -> None:
    daemon = RunningDaemon(tmp_path, "RUNBENCHMARKS = False\n").start()
    try:
        with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
            client.call("reconfig")  # one more full policy pass
        daemon.wait_for("reconfig_applied")
        ad = slot_ad(daemon)
        assert ad["LastBenchmark"] == 0
        assert "Mips" not in ad and "KFlops" not in ad
        assert ad["Activity"] == "Idle"
        assert not any(e["event"].startswith("benchmarks_") for e in daemon.events())
    finally:
        daemon.stop(signal.SIGQUIT)


def test_runbenchmarks_true_at_startup_only_when_defined(tmp_path: Path) -> None:
    # defined as something the policy never finds true in Unclaimed: still one run at start
    daemon = RunningDaemon(tmp_path, "RUNBENCHMARKS = MY.NoSuchAttribute\n").start()
    try:
        daemon.wait_for("benchmarks_finished", timeout=60)
        requested = [e for e in daemon.events() if e["event"] == "benchmarks_requested"]
        assert [e["reason"] for e in requested] == ["startup"]
        ad = slot_ad(daemon)
        assert ad["Mips"] > 0 and ad["LastBenchmark"] > 0
        assert ad["Activity"] == "Idle"
        assert ("Unclaimed/Benchmarking", "3") not in transitions(daemon)
    finally:
        daemon.stop(signal.SIGQUIT)


def test_runbenchmarks_default_runs_them_once_in_unclaimed(tmp_path: Path) -> None:
    # HTCondor 25's default, LastBenchmark == 0: the first Unclaimed/Idle pass runs them
    # (transition 3), and once LastBenchmark is set they never run again
    daemon = RunningDaemon(tmp_path)
    daemon.config.write_text(daemon.config_text("").replace("RUNBENCHMARKS = 0\n", ""))
    daemon.start()
    try:
        finished = daemon.wait_for("benchmarks_finished", timeout=60)
        daemon.wait_for("slot_state_changed", new="Unclaimed/Idle", transition="4")
        assert ("Unclaimed/Benchmarking", "3") in transitions(daemon)
        with ControlClient(daemon.root / "state" / "log" / "execd.sock") as client:
            client.call("reconfig")  # one more full policy pass
        daemon.wait_for("reconfig_applied")
        ad = slot_ad(daemon)
        assert ad["Mips"] == finished["mips"] and ad["KFlops"] == finished["kflops"]
        assert ad["LastBenchmark"] > 0 and ad["Activity"] == "Idle"
        assert [e["event"] for e in daemon.events()].count("benchmarks_finished") == 1
    finally:
        daemon.stop(signal.SIGQUIT)
