"""Claims and jobs on this node: carving d-slots, claim ids, starters, outcomes.

The policy engine decides; this module carries its decisions out: it carves a dynamic
slot for a claim on a partitionable slot, launches a starter for SpawnStarter, signals
it for Suspend/Continue/SoftKill/HardKill/KillStarterFamily, waits for it off the event
loop, reads its durable report and tells the engine the starter exited.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import log
from execd.cgroups.discovery import discover
from execd.cgroups.enforcement import announce_enforcement
from execd.cgroups.fs import CgroupFS
from execd.cgroups.tree import CgroupTree
from execd.claims.ids import ClaimId, ClaimIdFactory
from execd.classads import new_ad
from execd.daemon.control import ControlError
from execd.daemon.policy_glue import now, slot_facts
from execd.errors import CgroupError, ExecdError, ResourceError
from execd.policy import actions as act
from execd.slots import from_config
from execd.slots.requests import RequestModifier
from execd.starter.follow import follow_starter
from execd.starter.launcher import StarterHandle, launch_starter
from execd.starter.spec import StarterSpec, parse_signal

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
    done: asyncio.Event = field(default_factory=asyncio.Event)
    started: float = field(default_factory=time.time)


class JobManager:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.claims: dict[str, tuple[str, ClaimId]] = {}  # full claim id -> (slot, claim)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, Job] = {}  # slot -> job
        self.ids = ClaimIdFactory(f"<{os.uname().nodename}>", int(time.time()))
        self.sequence = 0
        self.tree: CgroupTree | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    # -- setup ----------------------------------------------------------------------
    def setup_cgroups(self) -> None:
        """Own BASE_CGROUP and move the daemon into its leaf; jobs need it."""
        settings = self.daemon.settings
        base = settings.get_str("BASE_CGROUP") or "htcondor"
        try:
            fs = CgroupFS()
            tree = CgroupTree(fs, discover(fs), base)
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
                      claim: ClaimId | None = None) -> dict[str, Any]:
        """Claim a slot (carving a d-slot from a partitionable one); `claim` is the id to
        give it (pool mode: the one the schedd already holds), else a new one."""
        engine = self.daemon.engine
        slots = self.daemon.node.slots
        target = slot_name or self._default_slot()
        if target not in engine.slots:
            raise ControlError("bad_args", f"no slot named {target!r}")
        moment = now()
        ad = new_ad(job_ad)
        name = target
        carved = None
        slot_id = int(target.removeprefix("slot").split("_")[0])
        pslot = slots.partitionable.get(slot_id) if "_" not in target else None
        if pslot is not None:
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
        accepted, actions = engine.request_claim(name, claim, ad, moment)
        self.daemon.execute(actions)
        if not accepted:
            if carved is not None and pslot is not None:
                engine.slots.pop(name, None)
                pslot.release(carved.sub_id)
            why = next((a.fields.get("why") for a in actions
                        if isinstance(a, act.LogEvent) and a.event == "claim_refused"), "refused")
            raise ControlError("refused", f"{name}: claim refused: {why}")
        self.claims[claim.full()] = (name, claim)
        logger.info("claim_granted", slot=name, claim=str(claim))
        return {"slot": name, "claim_id": claim.full()}

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

    def activate(self, claim_id: Any, job_ad: dict[str, Any]) -> dict[str, Any]:
        slot, claim = self.lookup(claim_id)
        if self.tree is None:
            raise ControlError("refused", "jobs cannot run: execd has no cgroup v2 tree")
        self.sequence += 1
        job_id = str(job_ad.get("GlobalJobId") or f"{claim.birthday}.{self.sequence}")
        job = Job(job_id, slot, claim, dict(job_ad))
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
        slot, _claim = self.lookup(claim_id)
        try:
            self.daemon.execute(self.daemon.engine.release(slot, now()))
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        self.claims.pop(claim_id, None)
        return {"released": slot}

    def signal_job(self, claim_id: Any, verb: str) -> dict[str, Any]:
        slot, _ = self.lookup(claim_id)
        engine = self.daemon.engine
        moment = now()
        try:
            if verb == "vacate":
                actions = engine.vacate(slot, moment)
            elif verb == "alive":
                actions = engine.alive(slot, moment)
            else:
                raise ControlError("bad_args", f"unknown job verb {verb}")
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        self.daemon.execute(actions)
        return {"slot": slot}

    async def result(self, job_id: Any, wait: bool) -> dict[str, Any]:
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        if job is None:
            raise ControlError("bad_args", f"no job {job_id!r}")
        if wait:
            await job.done.wait()
        return {"job_id": job.job_id, "slot": job.slot, "done": job.done.is_set(),
                "report": job.report, "hold_reason": job.hold_reason}

    # -- actions ------------------------------------------------------------------------
    def spawn(self, slot: str) -> None:
        job = self.running.get(slot)
        if job is None or self.tree is None:
            logger.error("spawn_without_job", slot=slot)
            return
        paths = self.daemon.paths
        workdir = paths.spool / "jobs" / job.job_id.replace("/", "_")
        workdir.mkdir(parents=True, exist_ok=True)
        spec = self.spec(job, workdir)
        handle = launch_starter(spec, str(workdir / "spec.json"), str(workdir / "starter.log"))
        job.handle = handle
        logger.info("starter_spawned", slot=slot, job=job.job_id, pid=handle.pid)
        task = asyncio.get_running_loop().create_task(self._watch(job))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        # seed 002's STARTER_* policy each poll; a broken slot when the starter is gone
        follow_starter(self.tasks, job, handle, spec, settings=self.daemon.settings,
                       mark_broken=self.daemon.node.mark_broken)

    def spec(self, job: Job, workdir: Path) -> StarterSpec:
        settings = self.daemon.settings
        assert self.tree is not None
        ad = job.ad
        facts = self._facts(job.slot)
        args = ad.get("Args", ad.get("Arguments", []))
        if isinstance(args, str):
            args = args.split()
        env = ad.get("Env", {})
        if isinstance(env, str):
            env = dict(p.split("=", 1) for p in env.split(";") if "=" in p)
        return StarterSpec(
            job_id=job.job_id,
            slot_name=job.slot,
            cmd=str(ad.get("Cmd", "")),
            args=[str(a) for a in args],
            env={str(k): str(v) for k, v in env.items()},
            owner=str(ad.get("Owner", "nobody")),
            execute_dir=str(self.daemon.paths.execute),
            report_path=str(workdir / "report.json"),
            cgroup_mount=str(self.tree.hierarchy.mount),
            base_cgroup=str(self.tree.base.relative_to(self.tree.hierarchy.mount)),
            cpus=float(facts.get("Cpus", 1)),
            memory_mb=int(facts.get("Memory", 0)),
            # The d-slot's own GPUs (AssignedGPUs), and only those, are the job's.
            gpus=[g for g in str(facts.get("AssignedGPUs", "")).replace(" ", "").split(",")
                  if g],
            stdin=ad.get("In"),
            stdout=ad.get("Out"),
            stderr=ad.get("Err"),
            iwd=ad.get("Iwd"),
            kill_sig=parse_signal(ad.get("KillSig", "SIGTERM")),
            vacate_seconds=float(settings.get_int("MachineMaxVacateTime") or 600),
            polling_interval=float(settings.get_int("CGROUP_POLLING_INTERVAL") or 5),
            allow_runas_owner=settings.get_bool("STARTER_ALLOW_RUNAS_OWNER", True),
            slot_user=settings.get_str("SLOT_USER", slot=int(job.slot[4:].split("_")[0])),
            memory_policy=settings.get_str("CGROUP_MEMORY_LIMIT_POLICY") or "hard",
            disable_swap=settings.get_bool("DISABLE_SWAP_FOR_JOB", True),
            pids_max=settings.get_int("EXECD_PIDS_MAX") or None,
            always_hold_on_oom=settings.get_bool("STARTER_ALWAYS_HOLD_ON_OOM", True),
            status_path=str(workdir / "status.json"),
            pid_namespace=settings.get_bool("USE_PID_NAMESPACES"),
            network_namespace=settings.get_bool("EXECD_JOB_NETWORK_NAMESPACE"),
            thread_env_vars=settings.get_list("STARTER_NUM_THREADS_ENV_VARS"),
        )

    async def _watch(self, job: Job) -> None:
        assert job.handle is not None
        handle = job.handle
        await asyncio.get_running_loop().run_in_executor(None, handle.wait)
        try:
            job.report = handle.report()
        except (OSError, ValueError) as exc:
            job.report = {"ExitReason": "no_report", "Error": str(exc)}
        logger.info("job_finished", slot=job.slot, job=job.job_id,
                    exit_code=job.report.get("ExitCode"), reason=job.report.get("ExitReason"),
                    hold=job.report.get("HoldReason"))
        self.running.pop(job.slot, None)
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
        elif isinstance(action, act.HoldJob):
            if job is not None:
                job.hold_reason = action.reason
        elif isinstance(action, act.DeleteDynamicSlot):
            self.delete_dynamic(action.slot)
        elif isinstance(action, act.NotifyClaimHolder):
            logger.info("claim_holder_notified", slot=action.slot, reason=action.reason)
            for key, (slot, _claim) in list(self.claims.items()):
                if slot == action.slot and action.reason in ("released", "lease_expired"):
                    del self.claims[key]
        else:
            return False
        return True

    def delete_dynamic(self, name: str) -> None:
        parent_id, _, sub = name.removeprefix("slot").partition("_")
        pslot = self.daemon.node.slots.partitionable.get(int(parent_id))
        if pslot is not None and sub.isdigit():
            pslot.release(int(sub))
        self.daemon.engine.slots.pop(name, None)
        for key, (slot, _claim) in list(self.claims.items()):
            if slot == name:
                del self.claims[key]
        logger.info("dynamic_slot_deleted", slot=name)

