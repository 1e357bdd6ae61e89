"""A job's starter, from launch to outcome: the half of JobManager that runs jobs.

JobManager (execd.daemon.jobs) grants claims and carries out the engine's actions; for
SpawnStarter it comes here. A job's starter is launched once its gate (a pool job's input
transfer) and PREPARE_JOB allow, recorded in the state store before `activate` is
acknowledged, awaited on its pidfd off the event loop, and its durable report becomes the
job's outcome, which its holder takes (or the claim's end drops).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import log
from execd.daemon import job_exit, procwatch
from execd.daemon.ended_job_ad import ended_job_ad
from execd.daemon.job import preemption_badput
from execd.daemon.policy_glue import now, slot_facts
from execd.daemon.starter_spec import ad_file_texts, starter_spec
from execd.daemon.store import JobRecord, Store, StoreError
from execd.errors import ExecdError
from execd.hooks import job_hook_runs
from execd.policy.states import Activity, State
from execd.starter.follow import follow_starter
from execd.starter.launcher import launch_starter
from execd.starter.sandbox import remove_tree
from execd.starter.spec import StarterSpec

if TYPE_CHECKING:
    from execd.cgroups.tree import CgroupTree
    from execd.claims.ids import ClaimId
    from execd.daemon.job import Job
    from execd.daemon.runtime import Daemon

logger = log.get_logger("jobs")
# How long a shutdown waits, once its last job ended, for pool jobs' conversations to
# finish telling their shadows how the jobs ended (StarterLifecycle.left).
CONCLUDE_TIMEOUT_S = 120.0


class StarterLifecycle:
    """JobManager's starters (a base class of it: the state below is JobManager's)."""

    daemon: Daemon
    tree: CgroupTree | None
    claims: dict[str, tuple[str, ClaimId]]  # full claim id -> (slot, claim)
    jobs: dict[str, Job]
    running: dict[str, Job]  # slot -> job
    store: Store
    sequence: int
    tasks: set[asyncio.Task[None]]
    last_ended: float | None  # a shutdown's: when its last running job ended (monotonic)
    conversations: set[object]  # the pool jobs' runners (PoolJob) until their conversation ends

    def workdir(self, job_id: str) -> Path:
        return self.daemon.paths.spool / "jobs" / job_id.replace("/", "_")

    def _facts(self, name: str) -> dict[str, Any]:
        for ad in self.daemon.node.ads():
            if str(ad["Name"]).split("@")[0] == name:
                return slot_facts(ad)
        return {}

    def _machine_ad(self, job: Job, resource_ad: Any | None) -> Any | None:
        """The job's slot's ad for its `.machine.ad`, built for that slot alone (never
        every slot's: this is the launch path; Daemon.slot_ad)."""
        if resource_ad is None:
            logger.warning("job_machine_ad_missing", slot=job.slot, job=job.job_id)
            return None
        return self.daemon.slot_ad(job.slot, resource_ad)

    def forget(self, job: Job) -> None:
        """The holder has the outcome (or gave up the claim): drop record and workdir."""
        self.store.remove_job(job.job_id)
        self.jobs.pop(job.job_id, None)
        remove_tree(self.workdir(job.job_id))

    def left(self) -> bool:
        """What a shutdown waits for: a job that runs, or a pool job's conversation that
        still tells its shadow how the job ended (output transfer, job_exit), as
        condor_startd waits for its starters; those at most CONCLUDE_TIMEOUT_S after the
        last job ended (a shadow gone away is not waited for until its lease ends)."""
        if self.running:
            self.last_ended = None
            return True
        if not self.conversations:
            return False
        mono = time.monotonic()
        if self.last_ended is None:
            self.last_ended = mono
            logger.info("shutdown_waits_for_shadows", conversations=len(self.conversations),
                        at_most_s=CONCLUDE_TIMEOUT_S)  # fmt: skip
        if mono - self.last_ended < CONCLUDE_TIMEOUT_S:
            return True
        logger.warning("shutdown_conversations_cut", conversations=len(self.conversations),
                       after_s=CONCLUDE_TIMEOUT_S)  # fmt: skip
        return False

    def forget_when_done(self, job: Job) -> None:
        """The holder has (or will have) the outcome another way (a pool job's shadow)."""
        async def when_done() -> None:
            await job.done.wait()
            if self.jobs.get(job.job_id) is job:
                self.forget(job)

        if job.done.is_set():
            if self.jobs.get(job.job_id) is job:
                self.forget(job)
            return
        self._track(when_done())

    def write_history(self, job: Job) -> None:
        """The job's STARTD_HISTORY record, once: a restarted daemon knows from the store
        whether the old one wrote it. Best effort: whatever goes wrong is logged, and
        the job's end (or the daemon's recovery) goes on."""
        if job.history_written:
            return
        job.history_written = True
        try:
            self._write_history(job)
        except Exception as exc:  # a bug, a store error: the record, never the job
            logger.exception("startd_history_failed", job=job.job_id, error=str(exc))

    def _write_history(self, job: Job) -> None:
        stored = self.jobs.get(job.job_id) is job  # not yet forgotten: its row is there
        if stored and self.store.history_written(job.job_id):
            return
        # (self is the JobManager this class is a base of)
        ad = ended_job_ad(self, job, time.time())  # type: ignore[arg-type]
        if self.daemon.startd_history.record(ad, job.job_id) and stored:
            try:  # (a forgotten job's row, and so the mark, is gone: none to leave)
                self.store.mark_history_written(job.job_id)
            except StoreError as exc:
                logger.error("history_mark_not_stored", job=job.job_id, error=str(exc))

    # -- the starter: launch, watch, outcome ------------------------------------
    def spawn(self, slot: str) -> None:
        job = self.running.get(slot)
        if job is None or self.tree is None:
            logger.error("spawn_without_job", slot=slot)
            return
        workdir = self.workdir(job.job_id)
        workdir.mkdir(parents=True, exist_ok=True)
        if job.gate is not None and job.overrides is None:
            self._track(self._gate_then_spawn(job))
            return
        spec = self.spec(job, workdir)
        hooks = job_hook_runs.job_hooks_for(self.daemon.settings, job.ad, spec)
        if hooks is not None and "PREPARE_JOB" in hooks.config.paths:
            self._track(self._prepare_then_launch(job, workdir, hooks))
            return
        self._launch(job, workdir, hooks, spec)

    async def _gate_then_spawn(self, job: Job) -> None:
        """A pool job's starter starts once its sandbox holds the shadow's input."""
        assert job.gate is not None
        overrides = await job.gate
        if overrides is None or job.evicted or self.running.get(job.slot) is not job:
            job.report = {"ExitReason": "evicted_before_start" if job.evicted
                          else "not_started"}  # fmt: skip
            self._finished(job)
            return
        job.overrides = overrides
        try:
            self.spawn(job.slot)
        except (ExecdError, OSError) as exc:
            logger.error("starter_spawn_failed", slot=job.slot, job=job.job_id, error=str(exc))
            job.report = {"ExitReason": "spawn_failed", "Error": str(exc)}
            self._finished(job)

    def _track(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _launch(self, job: Job, workdir: Path, hooks: job_hook_runs.JobHooks | None,
                spec: StarterSpec) -> None:
        assert self.tree is not None
        slot = job.slot
        if spec.exit_fifo is not None:  # open before the starter can write to it
            with contextlib.suppress(FileExistsError):
                os.mkfifo(spec.exit_fifo, 0o600)
            job_exit.listen(job, spec.exit_fifo, self.job_exited)
        # (launch_starter starts it with its control signals blocked: one sent at once waits)
        handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"))
        job.handle, job.hooks = handle, hooks
        job.starter_start = procwatch.start_time(handle.pid, zombies=True) or 0
        # Recorded before `activate` is acknowledged: a new daemon will find it.
        self.store.add_job(JobRecord(
            job.job_id, slot, job.claim.session_id, job.ad, spec._asdict(), handle.pid,
            job.starter_start, str(self.tree.job(slot).slice),
            spec.sandbox or os.path.join(spec.execute_dir, f"dir_{handle.pid}"), job.started,
            vacate_reason=job.vacate_reason), sequence=("job", self.sequence))
        logger.info("starter_spawned", slot=slot, job=job.job_id, pid=handle.pid)
        self.watch(job, os.pidfd_open(handle.pid))

    async def _prepare_then_launch(self, job: Job, workdir: Path,
                                   hooks: job_hook_runs.JobHooks) -> None:
        """PREPARE_JOB first (seed 003): run the edited ad, or hold it, or send it back."""
        outcome = await hooks.prepare(job.ad)
        if outcome is not None and outcome.action != "run":
            if outcome.action == "hold":
                job.hold_reason = outcome.message
                job.report = {"ExitReason": "held", "HoldReason": outcome.message,
                              "HoldReasonCode": job_hook_runs.HOLD_PREPARE_JOB_FAILED,
                              "HoldReasonSubCode": outcome.code}
            else:  # 300 and up: back to idle, to be run again elsewhere or later
                job.report = {"ExitReason": "returned_to_idle", "HookStatusCode": outcome.code,
                              "HookStatusMessage": outcome.message}
            self._finished(job)
            return
        if job.evicted:  # vacated while the hook ran: never start it
            job.report = {"ExitReason": "evicted_before_start"}
            self._finished(job)
            return
        try:
            # PREPARE_JOB may have edited the ad: the spec is built from the edited one.
            self._launch(job, workdir, hooks, self.spec(job, workdir))
        except (ExecdError, OSError) as exc:
            logger.error("starter_spawn_failed", slot=job.slot, job=job.job_id, error=str(exc))
            job.report = {"ExitReason": "spawn_failed", "Error": str(exc)}
            self._finished(job)

    def watch(self, job: Job, pidfd: int) -> None:
        self._track(self._watch(job, pidfd))
        # seed 002's STARTER_* policy each poll; a broken slot when the starter is gone.
        # Adopted starters (after a restart) are followed as well.
        assert job.handle is not None
        if job.exit_fifo is None and job.handle.spec.exit_fifo is not None:  # adopted
            job_exit.listen(job, job.handle.spec.exit_fifo, self.job_exited)
        follow_starter(self.tasks, job, job.handle, job.handle.spec,
                       settings=self.daemon.settings, mark_broken=self.daemon.node.mark_broken)

    def spec(self, job: Job, workdir: Path) -> StarterSpec:
        assert self.tree is not None
        known = self.daemon.engine.slots.get(job.slot)  # the facts of its last policy pass:
        facts = known.facts if known is not None else self._facts(job.slot)  # no ad rebuild
        slots = self.daemon.node.slots
        resource_ad = slots.resource_ad(job.slot, int(time.time()), self.daemon.node.load)
        spec = starter_spec(job.job_id, job.slot, job.ad, facts,
                            settings=self.daemon.settings, execute=self.daemon.paths.execute,
                            tree=self.tree, workdir=workdir, slot_ad=resource_ad,
                            node_gpus=slots.facts.gpus)
        if job.gate is None:  # a pool job's conversation wrote them into its sandbox
            slot_ad = self._machine_ad(job, resource_ad)
            job_ad, machine_ad = ad_file_texts(job.ad, slot_ad)
            spec = spec._replace(job_ad=job_ad, machine_ad=machine_ad)
        return spec._replace(**job.overrides) if job.overrides else spec

    async def _watch(self, job: Job, pidfd: int) -> None:
        """Await the starter's exit on its pidfd: no thread per job, adopted ones too.
        UPDATE_JOB_INFO runs meanwhile and JOB_EXIT is awaited before the outcome counts."""
        assert job.handle is not None
        hooks, status_path = job.hooks, job.handle.spec.status_path
        updates = None
        if hooks is not None:
            updates = asyncio.ensure_future(hooks.update_loop(
                lambda: {**job.ad, **job_hook_runs.status_attributes(status_path, job.started)}))
        await procwatch.wait_exit(pidfd)
        if job.handle.proc is not None:
            job.handle.proc.wait()  # our child: reap it
        else:
            procwatch.reap(job.handle.pid)  # our child only after a restart in place
        if updates is not None:
            updates.cancel()
            await asyncio.gather(updates, return_exceptions=True)
        self._read_report(job)
        if hooks is not None:
            assert job.report is not None
            await hooks.job_exit({**job.ad, **job_hook_runs.status_attributes(
                status_path, job.started), **job_hook_runs.exit_attributes(
                job.report, time.time() - job.started)}, job.report, evicted=job.evicted)
        self._finished(job)

    def job_exited(self, job: Job) -> None:
        """The starter says the job has exited and it is cleaning up: Busy -> Cleaning."""
        slot = self.daemon.engine.slots.get(job.slot)
        if self.running.get(job.slot) is not job or slot is None \
                or slot.state is not State.CLAIMED \
                or slot.activity not in (Activity.BUSY, Activity.RETIRING, Activity.SUSPENDED):
            return  # being vacated or killed: the starter's exit ends it
        logger.info("job_exited", slot=job.slot, job=job.job_id)
        try:
            self.daemon.execute(self.daemon.engine.job_exited(job.slot, now()))
        except ExecdError as exc:
            logger.error("job_exit_not_applied", slot=job.slot, error=str(exc))

    def finish(self, job: Job) -> None:
        """The starter is gone: take its durable report, record it, tell the engine."""
        self._read_report(job)
        self._finished(job)

    def _read_report(self, job: Job) -> None:
        assert job.handle is not None
        job_exit.take(job, self.job_exited)  # said just before it went: that comes first
        try:
            job.report = job.handle.report()
        except (OSError, ValueError) as exc:
            job.report = {"ExitReason": "no_report", "Error": str(exc)}
        if job.report.get("GpuHidingProblem"):  # STARTER_HIDE_GPU_DEVICES fell short
            logger.warning("gpu_devices_not_hidden", slot=job.slot, job=job.job_id,
                           reason=job.report["GpuHidingProblem"])
        if job.report.get("SlotBrokenReason"):  # before the engine may delete the d-slot
            self.daemon.node.mark_broken(job.slot, str(job.report["SlotBrokenReason"]))

    def _finished(self, job: Job) -> None:
        """Record the outcome (memory and store) and tell the engine the starter is gone."""
        assert job.report is not None
        # its claim's flag, before the claim goes
        job.preemption_badput = preemption_badput(job, self.daemon.engine.slots.get(job.slot))
        logger.info("job_finished", slot=job.slot, job=job.job_id,
                    exit_code=job.report.get("ExitCode"), reason=job.report.get("ExitReason"),
                    hold=job.report.get("HoldReason"))
        if self.running.get(job.slot) is job:
            del self.running[job.slot]
        try:
            self.store.finish_job(job.job_id, time.time(), job.report, job.hold_reason,
                                  job.preemption_badput)
        except StoreError as exc:  # the outcome is still served from memory
            logger.error("job_outcome_not_stored", job=job.job_id, error=str(exc))
        if not job.history_deferred:  # a pool job's conversation writes it at its end
            self.write_history(job)  # (before a forget takes its usage and store row)
        if job.claim.full() not in self.claims:
            try:
                self.forget(job)  # its holder released the claim: nobody will ask
            except StoreError as exc:
                logger.error("job_outcome_not_stored", job=job.job_id, error=str(exc))
        job.done.set()
        self.daemon.wake.set()
        try:
            self.daemon.execute(self.daemon.engine.starter_exited(job.slot, now()))
        except ExecdError as exc:
            logger.error("starter_exit_not_applied", slot=job.slot, error=str(exc))
