"""A pool job: the shadow's conversation drives execd's own starter.

ACTIVATE_CLAIM puts the claim Claimed/Busy through the JobManager and the policy engine
with a *gate*: the engine's SpawnStarter waits. The conversation (execd/wire/shadow.py)
transfers the input into a sandbox under EXECUTE and then calls this runner's start(),
which opens the gate: the JobManager launches a starter that adopts that sandbox (the
job's user, its cgroup, never root) and leaves it in place for the output transfer.
What the shadow is told comes from the starter: register_job_info's usage from its
status.json, the exit (wait status, requeue after a kill, holds) from its durable report.

Whatever ends the conversation early (the shadow went away) kills the job through the
policy engine's deactivate path; a daemon restarting in place leaves it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import log
from execd.daemon.control import ControlError
from execd.daemon.pool_job_attrs import read_status, starter_update
from execd.daemon.update_ad import SandboxIdentity, UpdateAdFile, copy_update_attrs, update_attrs
from execd.starter.sandbox import job_environment
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.job_runner import JobExit, JobHeldError, JobLaunch, JobSetupError, spawn_failure
from execd.wire.ssh_sessions import is_interactive

if TYPE_CHECKING:
    from execd.daemon.job import Job
    from execd.daemon.jobs import JobManager

logger = log.get_logger("pool")

# How often start() looks for the starter's first status (the job has exec'd).
STARTED_POLL_S = 0.05
# CONDOR_HOLD_CODE::StartdHeldJob: the startd's policy (WANT_HOLD) holds the job.
HOLD_STARTD_HELD_JOB = 21
# CONDOR_HOLD_CODE::ClaimDeactivated: the vacate reason of a job its shadow deactivated.
CLAIM_DEACTIVATED = 1009
KILLED = signal.SIGKILL  # the wait status of a job killed before it reported one


def wait_status(report: dict[str, Any]) -> int:
    """The raw wait status the starter's report describes."""
    if report.get("ExitBySignal") is True:  # (0x80: WCOREDUMP, the job dumped core)
        core = 0x80 if report.get("JobCoreDumped") is True else 0
        return int(report.get("ExitSignal") or KILLED) & 0x7F | core
    if report.get("ExitBySignal") is False:
        return (int(report.get("ExitCode") or 0) & 0xFF) << 8
    return KILLED


def hold_from_report(report: dict[str, Any], argv: list[str] | None) -> JobHeldError | None:
    """The hold a starter's report means: a job that never ran (code 6, in HTCondor's
    words for the exec failure), or one the starter held (34/102: memory); else None."""
    reason = report.get("ExitReason")
    if reason == "spawn_failed":
        errno = int(report.get("HoldReasonSubCode") or 0)
        if argv is not None and "HoldReasonSubCode" in report:
            detail = report.get("SpawnError")
            return JobSetupError(spawn_failure(argv, errno, detail if isinstance(detail, str)
                                               else None), errno)  # fmt: skip
        return JobSetupError(f"execd could not start the job's starter: "
                             f"{report.get('Error', 'unknown error')}")  # fmt: skip
    if reason == "starter_failed":
        return JobSetupError(f"execd's starter failed: {report.get('StarterError')}")
    if reason == "held" and report.get("HoldReasonCode"):
        return JobHeldError(str(report.get("HoldReason", "")), int(report["HoldReasonCode"]),
                            int(report.get("HoldReasonSubCode") or 0))  # fmt: skip
    return None


class PoolJob:
    """The runner (execd.wire.job_runner.JobRunner) of one activated claim's job."""

    def __init__(self, jobs: JobManager, claim_id: str) -> None:
        self.jobs = jobs
        self.claim_id = claim_id
        self.gate: asyncio.Future[dict[str, Any] | None] = \
            asyncio.get_running_loop().create_future()
        self.job: Job | None = None
        self.launch: JobLaunch | None = None
        self.started = 0
        self.reported_suspended = False  # what the shadow was last told
        self.sandbox: Path | None = None  # an adopted job's transferred sandbox
        self.update_ad: UpdateAdFile | None = None  # its slot's ad in its sandbox

    def activate(self, job_ad: dict[str, Any], wire: Iterable[tuple[str, str]] | None = None,
                 ) -> None:  # fmt: skip
        """JobManager.activate with this runner's gate (ControlError if refused);
        `wire`: the ACTIVATE_CLAIM ad as sent, the startd's copy of the job ad."""
        result = self.jobs.activate(self.claim_id, job_ad, gate=self.gate)
        self.job = self.jobs.jobs[result["job_id"]]
        self.jobs.conversations.add(self)  # until close(): a shutdown waits for it
        self._keep_history(self.job, wire)

    @staticmethod
    def _keep_history(job: Job, wire: Iterable[tuple[str, str]] | WireAd | None) -> None:
        """The conversation's end writes the job's history record (with its updates)."""
        if wire is not None:  # less what condor_startd deletes from the request
            job.claim_ad = {name: text for name, text in
                            (wire.items() if isinstance(wire, dict) else wire)
                            if name.lower() != "_condor_send_activation_failure_ad"}
        job.history_deferred = True

    def note_update(self, update: WireAd) -> None:
        """A job update the conversation sent the shadow: the startd's copy takes it. The
        exit's carries the last measurements (conclude's usage), as condor_starter's final
        update: not measured again here (a second walk of the sandbox on the loop)."""
        if self.job is None:
            return
        if self.launch is not None:  # condor_starter tells its startd the sandbox
            self.job.updates.update(from_values({"CondorScratchDir": str(self.launch.sandbox)}))
        self.job.updates.update(update)

    def note_transferred(self, received: int, sent: int) -> None:
        if self.job is not None:
            self.job.transferred = (received, sent)

    @classmethod
    def adopted(cls, jobs: JobManager, claim_id: str, job: Job, started: int,
                sandbox: Path | None = None, *, wire: WireAd | None = None,
                identity: SandboxIdentity | None = None) -> PoolJob:  # fmt: skip
        """The runner of a job a restarted daemon adopted (it runs, or ended meanwhile);
        `sandbox`: where its input was transferred (None: a shared filesystem); `wire`:
        the shadow's job ad the conversation kept; `identity`: its sandbox as recorded
        at the job's start (None: no `.update.ad` is written)."""
        runner = cls(jobs, claim_id)
        cls._keep_history(job, wire)
        runner.sandbox = sandbox
        runner.gate.set_result(None)  # the starter was launched by the old daemon
        runner.job = job
        runner.started = started
        jobs.conversations.add(runner)
        if identity is not None and not job.done.is_set():
            # it sent updates before the restart: its .update.ad is written again at
            # once, as at its start, so that its next update has CpusUsage
            runner.update_ad = UpdateAdFile(identity, job.job_id)
            runner._first_update_ad(job.slot)
        return runner

    def runner(self, launch: JobLaunch) -> PoolJob:
        """The conversation's runner factory: the input is in `launch.sandbox`."""
        self.launch = launch
        identity = SandboxIdentity.of(str(launch.sandbox), *launch.ids)
        if identity is not None and self.job is not None:
            self.update_ad = UpdateAdFile(identity, self.job.job_id)
        return self

    def _first_update_ad(self, slot: str) -> None:
        """The job is being started: condor_starter's first update to its startd
        (the provisioned resources) follows the spawn, and condor_startd writes
        .update.ad from then on, first as it publishes the slot Busy, which that update
        precedes (a job that exits at once has it too); here at once, with the slot's
        ad as it is then (the job still running in it: the slot ad drops the job's
        attributes once its starter has exited). That slot's ad alone is built: this
        is the launch path. An optional file: a slot ad that cannot be built now is
        logged, and the job (its start, or its adoption after a restart) goes on."""
        assert self.update_ad is not None
        self.update_ad.enabled = True
        pool = self.jobs.daemon.pool
        try:
            public = pool.one_public_ad(slot) if pool is not None else None
        except Exception:  # the job must not depend on it
            logger.exception("update_ad_first_write_failed", slot=slot)
            return
        if public is not None:
            self.update_ad.publish(public)

    def publish_slot_ad(self, public: WireAd, interval_s: float | None = None) -> None:
        """The advertiser published the slot: its ad goes to the job's `.update.ad`,
        from the job's start until its end, when due (UpdateAdFile.publish)."""
        if self.update_ad is None:
            return
        if self.job is None or self.job.done.is_set():
            self.update_ad.enabled = False
        self.update_ad.publish(public, interval_s)

    async def close_update_ad(self) -> None:
        """Before the sandbox is removed (or kept, or handed over): no more writes."""
        if self.update_ad is not None:
            await self.update_ad.close()

    # -- the runner ------------------------------------------------------------------
    def _job(self) -> Job:
        assert self.job is not None, "activate() first"
        return self.job

    async def start(self) -> int:
        job, launch = self._job(), self.launch
        assert launch is not None
        if not self.gate.done():
            self.gate.set_result({
                "cmd": launch.argv[0], "args": launch.argv[1:], "env": launch.env,
                "stdin": launch.stdin_name, "stdout": launch.stdout_name,
                "stderr": launch.stderr_name, "iwd": str(launch.workdir),
                "sandbox": str(launch.sandbox),
                "wait_for_ssh_sessions": is_interactive(launch.job),
            })  # fmt: skip
        if self.update_ad is not None:
            self._first_update_ad(job.slot)
        # The starter publishes its first status once the job has exec'd; a job that
        # could not be started ends instead.
        while not job.done.is_set() and not self._status():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(job.done.wait(), STARTED_POLL_S)
        self.started = int(time.time())
        if job.done.is_set():
            self._raise_if_held(job.report or {})
        # The job's pid (condor_starter publishes its job's, which _CONDOR_JOB_PIDS of
        # condor_ssh_to_job names), not the starter's.
        pid = self._status().get("JobPid")
        return pid if isinstance(pid, int) and pid > 0 else 0

    def environment(self) -> dict[str, str]:
        """The environment the starter gave the job: the shadow's with what it adds for
        every job (_CONDOR_SLOT, TMPDIR, BATCH_SYSTEM, thread counts, assigned
        resources, $$(CondorScratchDir) expanded), as condor_starter's GetJobEnv."""
        job = self._job()
        if job.handle is None:
            return dict(self.launch.env) if self.launch is not None else {}
        spec = job.handle.spec  # pool jobs' scratch is their sandbox (adopt_scratch)
        return job_environment(spec, spec.sandbox or "")

    async def wait(self, timeout_s: float) -> JobExit | None:
        """The exit; None after timeout_s, or sooner when the job was suspended or
        continued (the next update tells the shadow, which logs 010/011)."""
        job = self._job()
        if (job.suspended is not None) != self.reported_suspended:
            return None
        job.state_changed.clear()
        waits = [asyncio.ensure_future(job.done.wait()),
                 asyncio.ensure_future(job.state_changed.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in waits:
                pending.cancel()
        if not job.done.is_set():
            return None
        report = job.report or {}
        self._raise_if_held(report)
        if job.hold_reason:  # the startd's policy (WANT_HOLD) evicted it to hold it
            raise JobHeldError(job.hold_reason, HOLD_STARTD_HELD_JOB, job.hold_subcode)
        duration = float(report.get("RemoteWallClockTime") or time.time() - job.started)
        reason = report.get("ExitReason")
        return JobExit(wait_status(report), duration, requested=reason != "exited",
                       graceful=reason == "soft_killed", vacate=job.vacate_reason,
                       outlived_by_sessions=report.get("WaitedForSshSessions") is True)  # fmt: skip

    def _raise_if_held(self, report: dict[str, Any]) -> None:
        error = hold_from_report(report, self.launch.argv if self.launch else None)
        if error is not None:
            raise error

    def _status(self) -> dict[str, Any]:
        return read_status(self.jobs, self._job())

    async def usage(self) -> dict[str, str]:
        """register_job_info's attributes from the starter's latest measurements; the
        startd side (the slot's ad) gets the same update, as condor_starter sends it."""
        job = self._job()
        self.reported_suspended = job.suspended is not None
        status = self._status()
        # The sandbox's walk off the event loop: the job decides how many entries it
        # has, and every other job's conversation, claim and command waits on the loop.
        update = await asyncio.to_thread(self._update_values, status)
        # condor_starter copies CpusUsage (and the cron metrics' usage) from the last
        # .update.ad its startd wrote: none before the first.
        written = None
        if self.update_ad is not None:
            await self.update_ad.first_written()  # the first (briefly, once) is in
            written = self.update_ad.written
        copy_update_attrs(update, written, update_attrs(self.jobs.daemon.settings))
        pool = self.jobs.daemon.pool
        if pool is not None:
            pool.job_attrs.updated(self.claim_id, job.job_id, update)
        return from_values(update)

    def _update_values(self, status: dict[str, Any]) -> dict[str, Any]:
        launch = self.launch
        # With file transfer (no Iwd of its own) the sandbox's size and stdio mtimes too.
        sandbox = self.sandbox if launch is None else launch.sandbox if launch.iwd is None \
            else None  # fmt: skip
        named = launch or JobLaunch  # an adopted job's: the sandbox's default names
        stdio = (named.stdout_name, named.stderr_name)
        return starter_update(status, self.started, self.reported_suspended,
                              sandbox, stdio)  # fmt: skip

    def kill(self) -> None:
        """The conversation is over: a job not started never starts, a running one is
        killed (the deactivate path: a suspended job is resumed first)."""
        job = self.job
        if not self.gate.done():
            self.gate.set_result(None)
        if job is None or job.done.is_set() or job.evicted:
            return
        if self.jobs.daemon.stopping == "restart":
            return  # restarting in place: the new daemon re-adopts the job
        try:
            self.jobs.signal_job(self.claim_id, "deactivate_forcefully")
        except ControlError as exc:
            logger.info("pool_job_not_killed", slot=job.slot, job=job.job_id, why=exc.message)
            return
        logger.info("pool_job_killed", slot=job.slot, job=job.job_id,
                    why="the shadow's conversation ended")  # fmt: skip

    def close(self) -> None:
        """After the conversation: kill what still runs; once the job has ended, its
        outcome is forgotten (the shadow had it), so the claim can run it again."""
        self.jobs.conversations.discard(self)
        self.jobs.daemon.wake.set()  # a shutdown may wait for this conversation's end
        self.kill()
        job = self.job
        if job is not None:
            # A job still running through a restart in place is the next image's; one
            # that ended is forgotten below, restart or not: its record is written now.
            if self.jobs.daemon.stopping != "restart" or job.done.is_set():
                job.history_deferred = False  # its updates are all in: written at its end
                if job.done.is_set():
                    self.jobs.write_history(job)
            self.jobs.forget_when_done(job)

