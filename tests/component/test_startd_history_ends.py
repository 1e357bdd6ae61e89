"""When a job's STARTD_HISTORY record is written, on a real Daemon and its real state
store in a tmp dir (no starter runs: the test gives the job its starter's report and
status file, as a starter that ended would leave them): a pool job that ends while execd
restarts in place, a claim released before its job ended, a record that cannot be built,
a job that could not be exec'd."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from execd import log
from execd.daemon import pool_job_attrs
from execd.daemon.job import Job
from execd.daemon.pool_job import PoolJob
from execd.daemon.runtime import Daemon
from execd.daemon.startd_history import HistoryConfig
from execd.wire.classad_codec import from_values
from tests.component.in_process_daemon import daemon_without_cgroups

JOB = {"Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 256, "ClusterId": 7,
       "ProcId": 0, "Owner": "alice", "GlobalJobId": "ap#7.0#1"}  # fmt: skip
EXITED = {"ExitReason": "exited", "ExitBySignal": False, "ExitCode": 3,
          "RemoteWallClockTime": 1.0}  # fmt: skip


def records(daemon: Daemon) -> list[dict[str, str]]:
    """The history file's records: each ad's `name = value` lines as a dict."""
    path = HistoryConfig.from_settings(daemon.settings).path
    assert path is not None
    out, ad = [], {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("*** "):
            out.append(ad)
            ad = {}
        else:
            name, _, value = line.partition(" = ")
            ad[name] = value
    return out


def history_marks(daemon: Daemon) -> list[str]:
    rows = daemon.jobs.store.db.execute("SELECT key FROM meta WHERE key LIKE 'history%'")
    return [str(row[0]) for row in rows.fetchall()]


def activated(daemon: Daemon, pool: bool = False) -> tuple[Job, PoolJob | None, str]:
    """A job activated on a claim, its starter held back by a gate (as a pool job's is
    until its input is in): the test ends it. Returns the job, its pool runner (if
    `pool`) and the claim id."""
    daemon.jobs.tree = object()  # type: ignore[assignment]  # (spawn only waits on the gate)
    claim_id = str(daemon.jobs.request_claim("slot1", JOB)["claim_id"])
    runner = None
    if pool:
        runner = PoolJob(daemon.jobs, claim_id)
        runner.activate(JOB, wire=from_values(JOB).items())
        assert runner.job is not None
        job = runner.job
    else:
        gate: asyncio.Future[dict[str, Any] | None] = \
            asyncio.get_running_loop().create_future()  # fmt: skip
        job = daemon.jobs.jobs[daemon.jobs.activate(claim_id, JOB, gate=gate)["job_id"]]
    for task in list(daemon.jobs.tasks):  # the starter never starts
        task.cancel()
    return job, runner, claim_id


def ends(daemon: Daemon, job: Job, report: dict[str, Any], **status: Any) -> None:
    """The job's starter ended: its status file, its report, then what finish() does."""
    if status:
        (daemon.jobs.workdir(job.job_id) / "status.json").write_text(json.dumps(status))
    job.report = dict(report)
    daemon.jobs._finished(job)


def in_daemon(tmp_path: Path, scenario: Callable[[Daemon], Coroutine[Any, Any, None]],
              ) -> None:  # fmt: skip
    async def run() -> None:
        daemon = daemon_without_cgroups(tmp_path)
        try:
            await scenario(daemon)
        finally:
            daemon.jobs.store.close()

    asyncio.run(run())  # the daemon's parts expect a running loop


def test_a_pool_job_that_ended_before_a_restart_in_place_gets_its_record(
        tmp_path: Path) -> None:  # fmt: skip
    """The job has ended, its conversation is in the output transfer when execd restarts
    in place: the ended job is forgotten (the next image has no job to go on with), so
    its record is written now."""
    async def scenario(daemon: Daemon) -> None:
        job, runner, _ = activated(daemon, pool=True)
        assert runner is not None
        ends(daemon, job, EXITED)
        assert records(daemon) == []  # the conversation's end writes it
        daemon.stopping = "restart"
        runner.close()
        assert job.job_id not in daemon.jobs.jobs
        (record,) = records(daemon)
        assert (record["ExitCode"], record["GlobalJobId"]) == ("3", '"ap#7.0#1"')

    in_daemon(tmp_path, scenario)


def test_a_local_job_whose_claim_went_first_is_written_with_its_usage_and_no_mark_left(
        tmp_path: Path) -> None:  # fmt: skip
    """The claim is released while the job runs: at its end it is forgotten (workdir and
    store row gone). Its record is written first, with the starter's last measurements,
    and leaves no history mark behind in the store."""
    async def scenario(daemon: Daemon) -> None:
        job, _, _ = activated(daemon)
        daemon.jobs._claim_gone(job.claim)
        ends(daemon, job, EXITED, ResidentSetSize=4321, JobPid=99)
        assert job.job_id not in daemon.jobs.jobs
        (record,) = records(daemon)
        assert (record["ExitCode"], record["ResidentSetSize"]) == ("3", "4321")
        assert history_marks(daemon) == []

    in_daemon(tmp_path, scenario)


def test_a_pool_job_whose_claim_went_first_leaves_no_mark_when_its_conversation_ends(
        tmp_path: Path) -> None:  # fmt: skip
    async def scenario(daemon: Daemon) -> None:
        job, runner, _ = activated(daemon, pool=True)
        assert runner is not None
        daemon.jobs._claim_gone(job.claim)
        ends(daemon, job, EXITED)  # forgotten: nobody will ask for the outcome
        runner.close()  # the conversation's end writes the record
        assert [r["ExitCode"] for r in records(daemon)] == ["3"]
        assert history_marks(daemon) == []

    in_daemon(tmp_path, scenario)


def test_a_record_that_cannot_be_built_is_logged_and_the_job_still_ends(
        tmp_path: Path) -> None:  # fmt: skip
    """A corrupt status file (a JobPid that is no number) breaks building the record: the
    error is logged and the job's end goes on (its outcome served, the slot freed)."""
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)

    async def scenario(daemon: Daemon) -> None:
        job, _, _ = activated(daemon)
        ends(daemon, job, EXITED, JobPid="not a number")
        assert job.done.is_set() and daemon.jobs.running.get(job.slot) is None
        assert str(daemon.engine.slots[job.slot].activity.value) != "Busy"
        assert records(daemon) == []

    in_daemon(tmp_path, scenario)
    events = [json.loads(line) for line in logfile.read_text().splitlines()]
    failed = [e for e in events if e["event"] == "startd_history_failed"]
    assert failed and "not a number" in failed[0]["error"], events


def test_a_job_that_could_not_be_execd_has_no_made_up_exit_in_its_record(
        tmp_path: Path) -> None:  # fmt: skip
    async def scenario(daemon: Daemon) -> None:
        job, _, _ = activated(daemon)
        # a status left where the job never started (as the starter once wrote one)
        ends(daemon, job, {"ExitReason": "spawn_failed", "HoldReasonCode": 6,
                           "HoldReasonSubCode": 2, "HoldReason": "Failed to execute"},
             JobPid=99, JobState="Running")  # fmt: skip
        (record,) = records(daemon)
        assert not {"ExitBySignal", "ExitSignal", "ExitCode", "ExitReason"} & set(record)
        assert not {"JobPid", "JobState", "NumPids"} & set(record)  # it never ran
        assert record["JobStatus"] == "4" and record["StarterExitStatus"] == "0"

    in_daemon(tmp_path, scenario)


def test_a_pool_jobs_exit_walks_its_sandbox_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The exit update carries the last measurements (the conversation's usage()); the
    startd's copy takes them from it, without walking the sandbox again on the loop."""
    walks: list[Path] = []

    def counted(path: Path) -> tuple[int, int]:
        walks.append(path)
        return real(path)

    real = pool_job_attrs.sandbox_usage
    monkeypatch.setattr(pool_job_attrs, "sandbox_usage", counted)

    async def scenario(daemon: Daemon) -> None:
        job, runner, _ = activated(daemon, pool=True)
        assert runner is not None
        runner.sandbox = tmp_path / "sandbox"  # file transfer: the sandbox is measured
        runner.sandbox.mkdir()
        (runner.sandbox / "_condor_stdout").write_text("out\n")
        ends(daemon, job, EXITED, ResidentSetSize=4321, JobPid=99)
        usage = await runner.usage()  # what serve_shadow passes to conclude
        runner.note_update({**usage, "ExitBySignal": "false", "ExitCode": "3",
                            "JobState": '"Exited"'})  # fmt: skip
        assert len(walks) == 1, walks
        assert job.updates["ResidentSetSize"] == "4321"
        assert job.updates["ScratchDirFileCount"] == "1"
        assert job.updates["JobState"] == '"Exited"'

    in_daemon(tmp_path, scenario)
