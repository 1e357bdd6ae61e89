"""STARTD_HISTORY for jobs run on execd alone (`execd job`, the control socket): one
record per job, with the submitter as Owner, execd's job id as GlobalJobId and the exit;
exactly one for a job that runs through `execd restart`; a history file that cannot be
written costs the record and an error in the log, never the job, and the next start
writes the record of an outcome still held."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from execd.daemon.client import ControlClient
from tests.component.daemon_harness import REPO, RunningDaemon, public_dir, running_daemon

CONFIG = "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n"


def history(node: RunningDaemon) -> list[dict[str, str]]:
    """The records of the node's STARTD_HISTORY: each ad's lines, and its banner."""
    path = node.root / "state" / "log" / "startd_history"
    out, ad = [], {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("*** "):
            out.append({**ad, "***": line})
            ad = {}
        else:
            name, _, value = line.partition(" = ")
            ad[name] = value
    return out


def test_a_local_job_gets_one_record_with_its_exit(tmp_path: Path) -> None:
    with running_daemon(CONFIG, prefix="execd-hist-") as node:
        done = node.execd("job", "--", "sh", "-c", "exit 7", timeout=60)
        assert done.returncode == 7, done.stderr
        finished = node.wait_for("job_finished")
        (record,) = history(node)
    assert record["ExitCode"] == "7" and record["ExitBySignal"] == "false"
    assert record["JobState"] == '"Exited"' and record["JobStatus"] == "4"
    assert record["Owner"] == '"root"' and record["GlobalJobId"] == f'"{finished["job"]}"'
    assert int(record["RemoteWallClockTime"]) >= 0
    assert record["***"].startswith(
        f'*** Offset = 0 ClusterId = -1 ProcId = -1 Owner = "root" '
        f'CompletionDate = {record["CompletionDate"]} CurrentTime = ')  # fmt: skip


def test_a_job_running_through_a_restart_in_place_gets_exactly_one_record(
        fifo: Path) -> None:  # fmt: skip
    with running_daemon(CONFIG, prefix="execd-hist-") as node:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(node.config), "job", "--",
             "sh", "-c", f"read code < {fifo}; exit $code"],
            env=node.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO)  # fmt: skip
        node.wait_for("starter_spawned")
        node.send(signal.SIGUSR2)
        assert node.wait_for("recovery_done")["adopted"] == 1
        with open(fifo, "w") as f:
            f.write("6\n")
        waiting.communicate(timeout=60)
        assert waiting.returncode == 6
        node.wait_for("job_finished")
        records = history(node)
        # and none more when the daemon restarts again with the outcome on record
        node.send(signal.SIGUSR2)
        node.wait_for("recovery_done")
        assert history(node) == records
    assert [r["ExitCode"] for r in records] == ["6"]


def test_a_history_file_that_cannot_be_written_loses_no_job(tmp_path: Path) -> None:
    config = CONFIG + "STARTD_HISTORY = /nonexistent/dir/startd_history\n"
    with running_daemon(config, prefix="execd-hist-") as node:
        done = node.execd("job", "--", "sh", "-c", "echo fine; exit 3", timeout=60)
        assert done.returncode == 3 and done.stdout.strip() == "fine", done.stderr
        failed = node.wait_for("startd_history_not_written")
        assert failed["file"] == "/nonexistent/dir/startd_history"
        assert "No such file or directory" in failed["error"]
        assert node.execd("status", "-af", "Name").returncode == 0  # it runs on


def test_the_next_start_writes_the_record_a_broken_file_cost(tmp_path: Path) -> None:
    """The job's outcome is held (not taken), its record could not be written; execd is
    killed, the file's directory made, execd started: the record is written, once."""
    with public_dir("execd-hist-") as root:
        broken = root / "history-dir"
        node = RunningDaemon(root, CONFIG + f"STARTD_HISTORY = {broken}/startd_history\n")
        node.start()
        try:
            socket = Path(node.execd("config-val", "RUN").stdout.strip()) / "execd.sock"
            ad = {"Cmd": "/bin/sh", "Args": ["-c", "exit 4"], "RequestCpus": 1,
                  "RequestMemory": 64, "Iwd": "/tmp"}  # fmt: skip
            with ControlClient(socket, timeout=60) as c:
                claim = c.call("request_claim", {"job": ad})
                job = c.call("activate", {"claim_id": claim["claim_id"], "job": ad})
                assert c.call("job_result", {"job_id": job["job_id"], "wait": True})["done"]
            node.wait_for("startd_history_not_written", job=job["job_id"])
            assert node.proc is not None
            node.proc.kill()
            node.proc.communicate()  # reaped, its pipes closed
            broken.mkdir()
            node.start()  # (its recovery before execd_started, which start() awaits)
            node.send(signal.SIGUSR2)  # and a restart with it written adds none
            node.wait_for("recovery_done")
            lines = (broken / "startd_history").read_text().splitlines()
        finally:
            node.stop(signal.SIGQUIT)
    assert [line for line in lines if line.startswith("ExitCode")] == ["ExitCode = 4"]
    assert sum(line.startswith("*** ") for line in lines) == 1
