"""Claims and jobs on this node: carving d-slots, claim ids, the engine's job actions.

The policy engine decides; this module carries its decisions out: it carves a dynamic
slot for a claim on a partitionable slot, starts a starter for SpawnStarter and signals
it for Suspend/Continue/SoftKill/HardKill/KillStarterFamily. Launching a starter,
awaiting it and taking its report are execd.daemon.job_launch's (a base class).
Each job is an execd.daemon.job.Job.

Every claim and job is written to the state store (execd.daemon.store) before the
command that made it is acknowledged; execd.daemon.recovery rebuilds this manager from
the store after a restart.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from execd import log
from execd.cgroups.discovery import PROC_SELF_CGROUP, delegated_unit_cgroup, discover
from execd.cgroups.enforcement import announce_enforcement
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.classads import new_ad
from execd.daemon.control import ControlError
from execd.daemon.job import Job
from execd.daemon.job_launch import StarterLifecycle
from execd.daemon.matching import Matches
from execd.daemon.policy_glue import now
from execd.daemon.store import ClaimRecord, Store, StoreError, carved_json
from execd.daemon.vacate_reasons import vacate_reason
from execd.errors import CgroupError, ConfigError, ExecdError, ResourceError
from execd.policy import actions as act
from execd.policy import commands
from execd.policy.states import State, label
from execd.slots import from_config
from execd.slots.requests import RequestModifier

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("jobs")


class JobManager(StarterLifecycle):
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.claims: dict[str, tuple[str, ClaimId]] = {}  # full claim id -> (slot, claim)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, Job] = {}  # slot -> job
        self.last_ended: float | None = None
        self.conversations: set[object] = set()
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
                      alive_interval: float | None = None,
                      user_priority: bool = False) -> dict[str, Any]:
        """Claim a slot (carving a d-slot from a partitionable one); `claim` is the id to
        give it (pool mode: the one the schedd already holds), else a new one;
        `alive_interval` the claim holder's (REQUEST_CLAIM's), else ALIVE_INTERVAL;
        `user_priority`: a negotiator's preempting claim, which needs no higher RANK.
        The answer's `preempts_for` says why a claimed slot was preempted ("rank" or
        "user_priority"; None: it was not claimed)."""
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
            # as condor_startd: the job is MY, the p-slot's ad TARGET (its DiskQuantum)
            slot_ad = engine.machine_ad(engine.slots[target], moment, full=True)
            try:
                request = modifier.request(ad, slot_ad, list(pslot.free_amounts))
                carved = pslot.carve(request)
            except ResourceError as exc:
                raise ControlError("refused", str(exc)) from None
            name = carved.name
            facts = {**self._facts(name), "Cpus": carved.cpus, "Memory": carved.memory_mb,
                     "Disk": carved.disk_kb}
            self.daemon.execute(engine.add_slot(name, facts, moment, dynamic=True, parent=target))
        claim = claim or self.ids.new()
        # only a claimed slot's new claim waits unanswered (a Backfill slot's is answered)
        claimed = engine.slots[name].state is State.CLAIMED
        accepted, actions = engine.request_claim(name, claim, ad, moment,
                                                 alive_interval=alive_interval,
                                                 user_priority=user_priority)
        self.daemon.execute(actions)
        if not accepted:
            if carved is not None and pslot is not None:
                self.daemon.startd_stats.count("NewDSlotNotMatch")  # its START said no
                engine.slots.pop(name, None)
                pslot.release(carved.sub_id)
            why = next((a.fields.get("why") for a in actions
                        if isinstance(a, act.LogEvent) and a.event == "claim_refused"), "refused")
            raise ControlError("refused", f"{name}: claim refused: {why}")
        self.matches.claimed(target)
        # its own lease: a preempting claim is the slot's preempting_claim, not its claim
        held = engine.slots[name].claim
        waiting = held is None or held.id != claim  # the slot's preempting_claim
        granted = engine.slots[name].preempting_claim if waiting else held
        assert granted is not None and granted.id == claim
        parent, resources = (target, carved_json(carved)) if carved is not None else (None, None)
        if waiting and held is not None:  # a d-slot's resources outlive the claim it takes
            parent, resources = self._carved_for(held.id.session_id, parent, resources)
        self.store.add_claim(ClaimRecord(
            claim.session_id, claim.full(), name, parent=parent, carved=resources,
            request_ad=job_ad, lease_duration=granted.lease.duration, granted=moment.wall,
            preempting=waiting and claimed))
        self.claims[claim.full()] = (name, claim)
        logger.info("claim_granted", slot=name, claim=str(claim))
        basis = next((a.fields.get("basis") for a in actions
                      if isinstance(a, act.LogEvent) and a.event == "preempting_claim"), None)
        return {"slot": name, "claim_id": claim.full(), "preempts_for": basis,
                "lease": granted.lease.duration}

    def _carved_for(self, session_id: str, parent: str | None,
                    resources: dict[str, Any] | None
                    ) -> tuple[str | None, dict[str, Any] | None]:
        """The parent and carved resources the claim `session_id` holds a d-slot with
        (from its record), for a preempting claim of that d-slot: when it takes the slot
        the old record goes, and a restart must carve the d-slot again from the new one."""
        for record in self.store.claims():
            if record.session_id == session_id and record.carved is not None:
                return record.parent, record.carved
        return parent, resources

    @staticmethod
    def claim_ids(birthday: int) -> ClaimIdFactory:
        return ClaimIdFactory(f"<{os.uname().nodename}>", birthday)

    def _default_slot(self) -> str:
        for name, slot in self.daemon.engine.slots.items():
            if not slot.dynamic and slot.state.value in ("Unclaimed", "Matched"):
                return name
        raise ControlError("refused", "no slot is free to claim")

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

    # -- actions ------------------------------------------------------------------------
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
                self._note_vacate_reason(job)  # also for a job whose starter is not up yet
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
            if self.daemon.pool is not None:  # a REQUEST_CLAIM waiting on it is answered
                self.daemon.pool.changed()
        elif isinstance(action, act.ClaimTookSlot):  # its lease starts now: so after a restart
            self.store.claim_took_slot(action.claim, now().wall)  # no longer waiting
        else:
            return False
        return True

    def _note_vacate_reason(self, job: Job) -> None:
        """Why the startd evicts `job` (vacate_reasons), from its slot's eviction, when its
        first kill goes out; a restored eviction keeps the stored reason. A reason the
        eviction gives replaces one a DEACTIVATE_CLAIM gave before ("Claim deactivated"),
        as condor_starter takes each vacate's reason until its final update: a shadow's
        DEACTIVATE_CLAIM, then the schedd's RELEASE_CLAIM, leaves "Schedd released the
        claim" (measured on condor_startd 25.14.1)."""
        slot = self.daemon.engine.slots.get(job.slot)
        if slot is not None and slot.state is State.PREEMPTING and job.evicting is None:
            job.vacate_reason = vacate_reason(slot.vacate_cause) or job.vacate_reason

    def _record_eviction(self, job: Job, how: str) -> None:
        """A restarted daemon must go on evicting it (Preempting), not find it Busy, and
        tell its shadow why (vacate_reasons), as the first kill signal's eviction said:
        a restored eviction's reason is the stored one, not the resumed vacate's."""
        slot = self.daemon.engine.slots.get(job.slot)
        if slot is None or slot.state is not State.PREEMPTING \
                or job.evicting in (how, "killing"):
            return
        job.evicting = how
        job.preemption_badput = job.preemption_badput or (
            slot.claim is not None and slot.claim.id == job.claim and slot.preemption_badput)
        try:
            self.store.set_evicting(job.job_id, how, job.vacate_reason, job.preemption_badput)
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
        if self.daemon.pool is not None:  # its ad goes now; a p-slot may wait for it
            self.daemon.pool.changed()
