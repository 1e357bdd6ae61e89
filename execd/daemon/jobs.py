"""Claims and jobs on this node: carving d-slots, claim ids, starters, outcomes.

The policy engine decides; this module carries its decisions out: it carves a dynamic
slot for a claim on a partitionable slot, launches a starter for SpawnStarter, signals
it for Suspend/Continue/SoftKill/HardKill/KillStarterFamily, waits for it off the event
loop, reads its durable report and tells the engine the starter exited.

Every claim and job is written to the state store (execd.daemon.store) before the
command that made it is acknowledged; execd.daemon.recovery rebuilds this manager from
the store after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import log
from execd.cgroups.discovery import PROC_SELF_CGROUP, delegated_unit_cgroup, discover
from execd.cgroups.enforcement import announce_enforcement
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.classads import new_ad
from execd.daemon import job_exit, procwatch
from execd.daemon.control import ControlError
from execd.daemon.matching import Matches
from execd.daemon.policy_glue import now, slot_facts
from execd.daemon.starter_spec import starter_spec
from execd.daemon.store import ClaimRecord, JobRecord, Store, StoreError, carved_json
from execd.errors import CgroupError, ConfigError, ExecdError, ResourceError
from execd.hooks import job_hook_runs
from execd.policy import actions as act
from execd.policy import commands
from execd.policy.states import Activity, State, label
from execd.slots import from_config
from execd.slots.requests import RequestModifier
from execd.starter.follow import follow_starter
from execd.starter.launcher import StarterHandle, launch_starter
from execd.starter.spec import StarterSpec

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("jobs")


@dataclass
class Job:
    job_id: str
    slot: str
    claim: ClaimId
    ad: dict[str, Any]
    handle: StarterHandle | None = None
    report: dict[str, Any] | None = None
    hold_reason: str | None = None
    hold_subcode: int = 0  # WANT_HOLD_SUBCODE, with hold_reason
    done: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.time)
    starter_start: int = 0  # /proc start time of the starter: with its pid, names it
    suspended: str | None = None  # by "policy" or by a "command" (SUSPEND_CLAIM)
    evicted: bool = False  # the daemon killed it (JOB_EXIT says evict; before start: never run)
    hooks: job_hook_runs.JobHooks | None = None  # its UPDATE_JOB_INFO/JOB_EXIT hooks
    exit_fifo: int | None = None  # read end of the starter's job-exit FIFO, while open
    evicting: str | None = None  # "vacating" or "killing" once a kill signal went out
    # Pool jobs: the starter waits for the shadow's input transfer. The gate's result is
    # what the spec takes from the shadow's conversation (cmd, args, env, stdio, the
    # sandbox), or None: never start it.
    gate: asyncio.Future[dict[str, Any] | None] | None = None
    overrides: dict[str, Any] | None = None
    state_changed: asyncio.Event = field(default_factory=asyncio.Event)  # (un)suspended


class JobManager:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.claims: dict[str, tuple[str, ClaimId]] = {}  # full claim id -> (slot, claim)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, Job] = {}  # slot -> job
        self.birthday = int(time.time())
        self.ids = self.claim_ids(self.birthday)
        try:
            self.store = Store(daemon.paths.spool / "state.db")
        except StoreError as exc:  # execd cannot start without it: say what to fix
            raise ConfigError(f"{exc} (it lives in SPOOL)") from None
        self.sequence = self.store.sequence("job")
        self.drain_recorded = self.store.drain() is not None
        self.matches = Matches(daemon)
        self.tree: CgroupTree | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    # -- setup ----------------------------------------------------------------------
    def setup_cgroups(self) -> None:
        """Own BASE_CGROUP and move the daemon into its leaf; jobs need it."""
        settings = self.daemon.settings
        base = settings.get_str("BASE_CGROUP") or "htcondor"
        try:
            fs = CgroupFS()
            hierarchy = discover(fs)
            # under systemd's Delegate=yes the unit's own cgroup is the base (DESIGN.md)
            base = delegated_unit_cgroup(hierarchy, fs.read(PROC_SELF_CGROUP)) or base
            tree = CgroupTree(fs, hierarchy, base)
            tree.setup(daemon_pid=os.getpid())
        except (CgroupError, OSError) as exc:
            logger.warning("cgroups_unavailable", error=str(exc),
                           effect="jobs cannot run until execd can write a cgroup v2 tree")
            return
        self.tree = tree
        logger.info("cgroup_tree_ready", base=str(tree.base),
                    controllers=sorted(tree.controllers))
        announce_enforcement(self.daemon.node, tree.controllers, settings)

    # -- claims -----------------------------------------------------------------------
    def request_claim(self, slot_name: str | None, job_ad: dict[str, Any],
                      claim: ClaimId | None = None,
                      alive_interval: float | None = None) -> dict[str, Any]:
        """Claim a slot (carving a d-slot from a partitionable one); `claim` is the id to
        give it (pool mode: the one the schedd already holds), else a new one;
        `alive_interval` the claim holder's (REQUEST_CLAIM's), else ALIVE_INTERVAL."""
        engine = self.daemon.engine
        slots = self.daemon.node.slots
        target = slot_name or self._default_slot()
        if target not in engine.slots:
            raise ControlError("bad_args", f"no slot named {target!r}")
        moment = now()
        self.matches.check(target, moment.mono)
        ad = new_ad(job_ad)
        name = target
        carved = None
        slot_id = int(target.removeprefix("slot").split("_")[0])
        pslot = slots.partitionable.get(slot_id) if "_" not in target else None
        if pslot is not None:
            why, actions = engine.carve_refusal(target, ad, moment)
            self.daemon.execute(actions)
            if why is not None:
                raise ControlError("refused", f"claim refused: {why}")
            config = self.daemon.config
            modifier = RequestModifier(from_config.modify_request_exprs(config))
            try:
                request = modifier.request(ad, None, list(pslot.free_amounts))
                carved = pslot.carve(request)
            except ResourceError as exc:
                raise ControlError("refused", str(exc)) from None
            name = carved.name
            facts = {**self._facts(name), "Cpus": carved.cpus, "Memory": carved.memory_mb,
                     "Disk": carved.disk_kb}
            self.daemon.execute(engine.add_slot(name, facts, moment, dynamic=True, parent=target))
        claim = claim or self.ids.new()
        accepted, actions = engine.request_claim(name, claim, ad, moment,
                                                 alive_interval=alive_interval)
        self.daemon.execute(actions)
        if not accepted:
            if carved is not None and pslot is not None:
                engine.slots.pop(name, None)
                pslot.release(carved.sub_id)
            why = next((a.fields.get("why") for a in actions
                        if isinstance(a, act.LogEvent) and a.event == "claim_refused"), "refused")
            raise ControlError("refused", f"{name}: claim refused: {why}")
        self.matches.claimed(target)
        lease = engine.slots[name].claim
        self.store.add_claim(ClaimRecord(
            claim.session_id, claim.full(), name, parent=target if carved else None,
            carved=None if carved is None else carved_json(carved), request_ad=job_ad,
            lease_duration=lease.lease.duration if lease else 0.0, granted=moment.wall))
        self.claims[claim.full()] = (name, claim)
        logger.info("claim_granted", slot=name, claim=str(claim))
        return {"slot": name, "claim_id": claim.full()}

    @staticmethod
    def claim_ids(birthday: int) -> ClaimIdFactory:
        return ClaimIdFactory(f"<{os.uname().nodename}>", birthday)

    def _default_slot(self) -> str:
        for name, slot in self.daemon.engine.slots.items():
            if not slot.dynamic and slot.state.value in ("Unclaimed", "Matched"):
                return name
        raise ControlError("refused", "no slot is free to claim")

    def _facts(self, name: str) -> dict[str, Any]:
        for ad in self.daemon.node.ads():
            if str(ad["Name"]).split("@")[0] == name:
                return slot_facts(ad)
        return {}

    def lookup(self, claim_id: Any) -> tuple[str, ClaimId]:
        if not isinstance(claim_id, str) or claim_id not in self.claims:
            raise ControlError("refused", "unknown or stale claim id")
        return self.claims[claim_id]

    def activate(self, claim_id: Any, job_ad: dict[str, Any],
                 gate: asyncio.Future[dict[str, Any] | None] | None = None) -> dict[str, Any]:
        """Start the job on the claim (Claimed/Busy); with a `gate`, its starter is
        launched only once the gate has a result (pool jobs: after the input transfer)."""
        slot, claim = self.lookup(claim_id)
        if self.tree is None:
            raise ControlError("refused", "jobs cannot run: execd has no cgroup v2 tree")
        self.sequence += 1
        job_id = str(job_ad.get("GlobalJobId") or f"{claim.birthday}.{self.sequence}")
        if job_id in self.jobs:
            raise ControlError("refused", f"job {job_id!r} exists already")
        if slot in self.running:
            raise ControlError("refused", f"{slot} already runs job {self.running[slot].job_id}")
        job = Job(job_id, slot, claim, dict(job_ad), gate=gate)
        self.running[slot] = job
        self.jobs[job_id] = job
        try:
            accepted, actions = self.daemon.engine.activate(slot, new_ad(job_ad), now())
        except ExecdError as exc:
            del self.running[slot], self.jobs[job_id]
            raise ControlError("refused", str(exc)) from None
        if not accepted:
            del self.running[slot], self.jobs[job_id]
            raise ControlError("refused", f"{slot}: activation refused by policy")
        self.daemon.execute(actions)
        return {"job_id": job_id, "slot": slot}

    def release(self, claim_id: Any) -> dict[str, Any]:
        slot, claim = self.lookup(claim_id)
        try:  # the claim named: a preempting claim's release undoes retirement (19)
            self.daemon.execute(self.daemon.engine.release(slot, now(), claim))
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        self._claim_gone(claim)
        return {"released": slot}

    def signal_job(self, claim_id: Any, verb: str) -> dict[str, Any]:
        """vacate, alive, suspend, continue, deactivate, deactivate_forcefully."""
        slot, claim = self.lookup(claim_id)
        engine = self.daemon.engine
        moment = now()
        try:
            if verb == "vacate":
                actions = engine.vacate(slot, moment)
            elif verb == "alive":
                actions = engine.alive(slot, moment, claim)
                self.store.renew_claim(claim.session_id, moment.wall)
            elif verb == "suspend":
                actions = commands.suspend_claim(engine, slot, moment)
            elif verb == "continue":
                actions = commands.continue_claim(engine, slot, moment)
            elif verb in ("deactivate", "deactivate_forcefully"):
                actions = commands.deactivate(engine, slot, moment,
                                              forceful=verb == "deactivate_forcefully")
            else:
                raise ControlError("bad_args", f"unknown job verb {verb}")
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        self.daemon.execute(actions)
        state = engine.slots.get(slot)
        return {"slot": slot,
                "state": label(state.state, state.activity) if state else "deleted"}

    async def result(self, job_id: Any, wait: bool, ack: bool = False) -> dict[str, Any]:
        """A job's outcome; `ack` tells execd the holder has it (the record may go)."""
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise ControlError("bad_args", f"no job {job_id!r} (unknown, or its outcome "
                               "was already taken)")
        if wait:
            await job.done.wait()
        done = job.done.is_set()
        if ack and done:
            self.forget(job)
        return {"job_id": job.job_id, "slot": job.slot, "done": done,
                "report": job.report, "hold_reason": job.hold_reason}

    def forget(self, job: Job) -> None:
        """The holder has the outcome (or gave up the claim): drop record and workdir."""
        self.store.remove_job(job.job_id)
        self.jobs.pop(job.job_id, None)
        shutil.rmtree(self.workdir(job.job_id), ignore_errors=True)

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

    def _claim_gone(self, claim: ClaimId) -> None:
        """The claim ended: its record goes, with the outcomes its holder did not take."""
        if self.claims.pop(claim.full(), None) is None:
            return
        self.store.remove_claim(claim.session_id)
        for job in list(self.jobs.values()):
            if job.claim == claim and job.done.is_set():
                self.forget(job)

    def record_drain(self, how: str, reason: str, resume: bool) -> None:
        self.store.set_drain(how, reason, resume)
        self.drain_recorded = True

    def forget_drain(self) -> None:
        if self.drain_recorded:
            self.store.clear_drain()
            self.drain_recorded = False

    def workdir(self, job_id: str) -> Path:
        return self.daemon.paths.spool / "jobs" / job_id.replace("/", "_")

    # -- actions ------------------------------------------------------------------------
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
            spec.sandbox or os.path.join(spec.execute_dir, f"dir_{handle.pid}"), job.started),
            sequence=("job", self.sequence))
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
        spec = starter_spec(job.job_id, job.slot, job.ad, facts,
                            settings=self.daemon.settings, execute=self.daemon.paths.execute,
                            tree=self.tree, workdir=workdir,
                            slot_ad=slots.resource_ad(job.slot, int(time.time())),
                            node_gpus=slots.facts.gpus)
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
        logger.info("job_finished", slot=job.slot, job=job.job_id,
                    exit_code=job.report.get("ExitCode"), reason=job.report.get("ExitReason"),
                    hold=job.report.get("HoldReason"))
        if self.running.get(job.slot) is job:
            del self.running[job.slot]
        try:
            self.store.finish_job(job.job_id, time.time(), job.report, job.hold_reason)
            if job.claim.full() not in self.claims:
                self.forget(job)  # its holder released the claim: nobody will ask
        except StoreError as exc:  # the outcome is still served from memory
            logger.error("job_outcome_not_stored", job=job.job_id, error=str(exc))
        job.done.set()
        self.daemon.wake.set()
        try:
            self.daemon.execute(self.daemon.engine.starter_exited(job.slot, now()))
        except ExecdError as exc:
            logger.error("starter_exit_not_applied", slot=job.slot, error=str(exc))

    def act(self, action: Any) -> bool:
        """Carry out one engine action; False when it is not a job action."""
        job = self.running.get(getattr(action, "slot", ""))
        handle = job.handle if job is not None else None
        if isinstance(action, act.SpawnStarter):
            self.spawn(action.slot)
        elif isinstance(action, act.Suspend | act.Continue | act.SoftKill | act.HardKill
                        | act.KillStarterFamily):
            if job is not None and not isinstance(action, act.Suspend | act.Continue):
                job.evicted = True
            if handle is None:
                return True
            {
                act.Suspend: handle.suspend,
                act.Continue: handle.continue_,
                act.SoftKill: handle.soft_kill,
                act.HardKill: handle.hard_kill,
                act.KillStarterFamily: handle.kill_family,
            }[type(action)]()
            logger.info("starter_signalled", slot=action.slot, action=type(action).__name__)
            if isinstance(action, act.SoftKill | act.HardKill | act.KillStarterFamily) \
                    and job is not None:
                self._record_eviction(job, "vacating" if isinstance(action, act.SoftKill)
                                      else "killing")
            if isinstance(action, act.Suspend | act.Continue) and job is not None:
                self._record_suspension(job, isinstance(action, act.Suspend))
        elif isinstance(action, act.HoldJob):
            if job is not None:
                job.hold_reason, job.hold_subcode = action.reason, action.subcode
        elif isinstance(action, act.DeleteDynamicSlot):
            self.delete_dynamic(action.slot)
        elif isinstance(action, act.NotifyClaimHolder):
            logger.info("claim_holder_notified", slot=action.slot, reason=action.reason)
            for slot, claim in list(self.claims.values()):
                if slot == action.slot and claim.session_id == action.claim:
                    self._claim_gone(claim)
        else:
            return False
        return True

    def _record_eviction(self, job: Job, how: str) -> None:
        """A restarted daemon must go on evicting it (Preempting), not find it Busy."""
        slot = self.daemon.engine.slots.get(job.slot)
        if slot is None or slot.state is not State.PREEMPTING \
                or job.evicting in (how, "killing"):
            return
        job.evicting = how
        try:
            self.store.set_evicting(job.job_id, how)
        except StoreError as exc:
            logger.error("eviction_not_stored", job=job.job_id, error=str(exc))

    def _record_suspension(self, job: Job, suspended: bool) -> None:
        """A restarted daemon must find a frozen job Suspended, and know who froze it."""
        slot = self.daemon.engine.slots.get(job.slot)
        by = ("command" if slot is not None and slot.suspended_by_command else "policy") \
            if suspended else None
        if by != job.suspended:
            job.suspended = by
            self.store.set_suspended(job.job_id, by)
            job.state_changed.set()  # a pool job's shadow is told at once

    def delete_dynamic(self, name: str) -> None:
        parent_id, _, sub = name.removeprefix("slot").partition("_")
        pslot = self.daemon.node.slots.partitionable.get(int(parent_id))
        broken = self.daemon.node.broken.get(name)
        if broken is not None:
            # As HTCondor's CONTINUE_TO_ADVERTISE_BROKEN_DYNAMIC_SLOTS: its resources stay
            # out of the p-slot (a process there could not be killed) and its ad is kept.
            logger.warning("broken_dynamic_slot_kept", slot=name, reason=broken)
        elif pslot is not None and sub.isdigit():
            pslot.release(int(sub))
        self.daemon.engine.slots.pop(name, None)
        for slot, claim in list(self.claims.values()):
            if slot == name:
                self._claim_gone(claim)
        logger.info("dynamic_slot_deleted", slot=name)
