"""STARTD_HISTORY for jobs run on execd alone (`execd job`, the control socket): one
record per job, with the submitter as Owner, execd's job id as GlobalJobId and the exit;
exactly one for a job that runs through `execd restart`; a history file that cannot be
written costs the record and an error in the log, never the job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import REPO, RunningDaemon, running_daemon

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


@pytest.fixture
def fifo() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="execd-fifo-") as tmp:
        Path(tmp).chmod(0o755)
        path = Path(tmp) / "go"
        os.mkfifo(path)
        path.chmod(0o666)
        yield path


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
