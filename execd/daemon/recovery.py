"""After a restart: rebuild claims, slots and jobs from the store; adopt live starters.

Starters run in their own session and outlive the daemon (`kill -9`, a crash, or a
restart in place). A new daemon reads the store and, for each claim, carves its d-slot
again and puts the slot back in Claimed; for each job that was running, it adopts the
starter if the process with that pid *and start time* still lives, or collects the
durable report the starter wrote if it ended meanwhile. Then it removes what is truly
orphaned — a starter launched but never recorded, job cgroups with no starter,
sandboxes and job directories with no job — and logs each thing it removed. Broken
slots come back too (execd.daemon.broken).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from execd import log
from execd.cgroups.tree import DAEMON_LEAF, JobCgroup
from execd.claims.ids import parse_claim_id
from execd.daemon import procwatch
from execd.daemon.broken import restore_broken
from execd.daemon.job import Job
from execd.daemon.policy_glue import now
from execd.daemon.store import ClaimRecord, JobRecord, dynamic_slot
from execd.errors import CgroupError, ExecdError
from execd.policy import commands
from execd.policy.slot import Now
from execd.starter.launcher import StarterHandle
from execd.starter.sandbox import remove_tree
from execd.starter.spec import StarterSpec

if TYPE_CHECKING:
    from execd.daemon.jobs import JobManager

logger = log.get_logger("recovery")


def recover(jobs: JobManager) -> dict[str, int]:
    """Rebuild `jobs` (and the engine's slots) from the store; returns what it did."""
    began = time.monotonic()
    moment = now()
    counts = {"claims": 0, "adopted": 0, "ended_meanwhile": 0, "broken": 0,
              "orphans_removed": 0}
    by_claim: dict[str, list[JobRecord]] = defaultdict(list)
    # a pool claim's conversation (execd.daemon.pool_conversation.restore) writes its
    # job's STARTD_HISTORY record; any other job's is written here or when it ends
    conversations = {held.session_id for held in jobs.store.pool_claims()}
    for record in jobs.store.jobs():
        by_claim[record.session_id].append(record)
    for claim in jobs.store.claims():
        name = _restore_claim(jobs, claim, moment)
        if name is None:
            continue
        counts["claims"] += 1
        for record in by_claim.pop(claim.session_id, []):
            try:
                job = Job(record.job_id, record.slot, parse_claim_id(claim.claim_id),
                          record.ad, started=record.started, starter_start=record.starter_start,
                          hold_reason=record.hold_reason, suspended=record.suspended,
                          evicting=record.evicting, vacate_reason=record.vacate_reason,
                          preemption_badput=record.preemption_badput)
                job.handle = StarterHandle(StarterSpec.from_dict(record.spec), None,
                                           pid=record.starter_pid)
            except (ValueError, KeyError, TypeError) as exc:
                logger.error("job_not_restored", job=record.job_id, error=str(exc))
                _drop_claimless_job(jobs, record)
                continue
            jobs.jobs[job.job_id] = job
            job.history_deferred = claim.session_id in conversations
            if record.finished is not None:  # ended before; its holder has not taken it
                job.report = record.report
                job.done.set()
                if not job.history_deferred:  # unless the old daemon wrote it
                    jobs.write_history(job)
                continue
            counts[_restore_job(jobs, job, moment)] += 1
    for records in by_claim.values():  # jobs whose claim is gone: nobody wants them
        for record in records:
            _drop_claimless_job(jobs, record)
    counts["broken"] = restore_broken(jobs)  # after the claims: a claimed one is carved
    counts["orphans_removed"] = remove_orphans(jobs)
    # New claim ids must not repeat a restored one (a restart within the same second
    # would give the same birthday and sequence): start after the newest birthday.
    newest = max((claim.birthday for _slot, claim in jobs.claims.values()), default=0)
    if newest >= jobs.birthday:
        jobs.birthday = newest + 1
        jobs.ids = jobs.claim_ids(jobs.birthday)
    drain = jobs.store.drain()
    if drain is not None:
        how, reason, resume = drain
        try:
            jobs.daemon.execute(jobs.daemon.engine.drain(
                how, moment, reason=reason, resume_on_completion=resume))
            logger.info("drain_restored", how=how, reason=reason)
        except ExecdError as exc:
            logger.error("drain_not_restored", how=how, error=str(exc))
            jobs.forget_drain()
    logger.info("recovery_done", seconds=round(time.monotonic() - began, 3), **counts)
    return counts


def _restore_claim(jobs: JobManager, claim: ClaimRecord, moment: Now) -> str | None:
    daemon, engine = jobs.daemon, jobs.daemon.engine
    name = claim.slot
    if claim.preempting:
        # A preempting claim still waiting for the slot (the store says so, whatever the
        # order of the grants' wall times): its holder's request died with the old daemon.
        logger.info("preempting_claim_not_restored", slot=name, claim=claim.session_id)
        jobs.store.remove_claim(claim.session_id)
        return None
    try:
        held = engine.slots.get(name)
        if held is not None and held.claim is not None:  # schema-4 file, no job on either
            raise ExecdError(f"{name} holds claim {held.claim.id} already")
        claim_id = parse_claim_id(claim.claim_id)
        if claim.carved is not None:
            carved = dynamic_slot(claim.carved)
            pslot = daemon.node.slots.partitionable.get(carved.parent_id)
            if pslot is None:
                raise ExecdError(f"no partitionable slot {carved.parent_id} any more")
            pslot.restore(carved)
            facts = {**jobs._facts(name), "Cpus": carved.cpus, "Memory": carved.memory_mb,
                     "Disk": carved.disk_kb}
            daemon.execute(engine.add_slot(name, facts, moment, dynamic=True,
                                           parent=claim.parent))
        elif name not in engine.slots:
            raise ExecdError(f"no slot named {name} any more")
        daemon.execute(commands.restore_claim(
            engine, name, claim_id, claim.request_ad or {}, moment,
            lease_duration=claim.lease_duration, renewed_wall=claim.last_renewed))
    except (ExecdError, ValueError, KeyError, TypeError) as exc:
        logger.error("claim_not_restored", slot=name, claim=claim.session_id, error=str(exc))
        jobs.store.remove_claim(claim.session_id)
        return None
    jobs.claims[claim_id.full()] = (name, claim_id)
    lease = engine.slot(name).claim
    left = max(0.0, lease.lease.expires_at() - moment.mono) if lease is not None else 0.0
    logger.info("claim_restored", slot=name, claim=claim.session_id,
                lease_left_s=round(left, 1))
    return name


def _restore_job(jobs: JobManager, job: Job, moment: Now) -> str:
    """Adopt a live starter, or take the report of one that ended during the outage."""
    assert job.handle is not None
    daemon = jobs.daemon
    daemon.execute(commands.restore_job(daemon.engine, job.slot, job.ad, moment,
                                        started_wall=job.started, suspended_by=job.suspended))
    jobs.running[job.slot] = job
    pid = job.handle.pid
    pidfd = procwatch.open_pidfd(pid, job.starter_start)
    if pidfd is None:
        procwatch.reap(pid)  # our child, if we re-executed ourselves
        logger.info("job_ended_meanwhile", slot=job.slot, job=job.job_id, starter_pid=pid)
        jobs.finish(job)
        return "ended_meanwhile"
    logger.info("starter_adopted", slot=job.slot, job=job.job_id, starter_pid=pid)
    jobs.watch(job, pidfd)
    if job.evicting is not None:  # it was being evicted: that goes on, the claim ends;
        try:  # its retirement and preemption's badput were decided before (job.preemption_badput)
            daemon.execute(daemon.engine.vacate(job.slot, moment,
                                                fast=job.evicting == "killing", resumed=True))
            logger.info("eviction_resumed", slot=job.slot, job=job.job_id, how=job.evicting)
        except ExecdError as exc:
            logger.error("eviction_not_resumed", slot=job.slot, error=str(exc))
    return "adopted"


def _drop_claimless_job(jobs: JobManager, record: JobRecord) -> None:
    """A job nobody can ask for: its starter goes (its cgroup goes with the orphans)."""
    if record.finished is None and procwatch.start_time(record.starter_pid) == \
            record.starter_start:
        os.kill(record.starter_pid, signal.SIGKILL)
        logger.warning("claimless_job_killed", slot=record.slot, job=record.job_id,
                       starter_pid=record.starter_pid)
    jobs.store.remove_job(record.job_id)
    remove_tree(jobs.workdir(record.job_id))


def remove_orphans(jobs: JobManager) -> int:
    """Starters with no record, cgroups with no starter, sandboxes with no job, job
    directories with no record."""
    removed = 0
    # A broken slot's slice holds what could not be killed: it stays, as the mark does.
    running = {job.slot for job in jobs.running.values()} | set(jobs.daemon.node.broken)
    starters = {job.handle.pid for job in jobs.running.values() if job.handle is not None}
    tree = jobs.tree
    if tree is not None:
        # A starter launched just before the old daemon died, before it was recorded:
        # it sits in the daemon's leaf with us, and nobody can ask for its job.
        for pid in tree.fs.read(tree.base / DAEMON_LEAF / "cgroup.procs").split():
            if int(pid) not in starters and int(pid) != os.getpid() and _is_starter(int(pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
                logger.warning("orphan_starter_killed", starter_pid=int(pid))
                removed += 1
        for child in tree.fs.children(tree.base):
            # only job cgroups (<slot>.slice): whatever else is there is not ours to judge
            if child == DAEMON_LEAF or not child.endswith(".slice") \
                    or child.removesuffix(".slice") in running:
                continue
            cgroup = JobCgroup(tree.fs, tree.base / child, frozenset())
            try:
                processes = len(cgroup.pids())
                cgroup.destroy()
            except CgroupError as exc:
                logger.error("orphan_cgroup_not_removed", cgroup=str(cgroup.slice), error=str(exc))
                continue
            logger.warning("orphan_cgroup_removed", cgroup=str(cgroup.slice), killed=processes)
            removed += 1
    execute = jobs.daemon.paths.execute
    # A pool job's sandbox is named by the shadow conversation that made it, not its pid;
    # it stays while the job is known (one that ended meanwhile has output to send).
    kept = {os.path.basename(job.handle.spec.sandbox) for job in jobs.jobs.values()
            if job.handle is not None and job.handle.spec.sandbox}  # fmt: skip
    for entry in _listdir(execute):
        # a sandbox, or a streamed stdout/stderr FIFO made next to one (stream_output)
        sandbox, dot, suffix = entry.partition(".")
        pid = sandbox.removeprefix("dir_")
        if sandbox.startswith("dir_") and pid.isdigit() and int(pid) not in starters \
                and sandbox not in kept and suffix in (("stdout", "stderr") if dot else ("",)):
            if dot:
                if not _remove_stream_fifo(execute / entry):
                    continue
            else:
                remove_tree(execute / entry)
                logger.warning("orphan_sandbox_removed", sandbox=str(execute / entry))
            removed += 1
    known = {jobs.workdir(job_id).name for job_id in jobs.jobs}
    spool_jobs = jobs.daemon.paths.spool / "jobs"
    for entry in _listdir(spool_jobs):
        if entry not in known:
            remove_tree(spool_jobs / entry)
            logger.info("orphan_job_dir_removed", directory=str(spool_jobs / entry))
            removed += 1
    return removed


def _remove_stream_fifo(path: Path) -> bool:
    """A crashed stream's FIFO removed (or a symlink in its place): in an EXECUTE of
    mode 1777 a job's user may have made anything there, and a directory or a regular
    file by that name is not the daemon's to remove; logged and left (False)."""
    try:
        mode = os.lstat(path).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISLNK(mode)):
            logger.warning("orphan_stream_fifo_kept", path=str(path),
                           why="not a FIFO")  # fmt: skip
            return False
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        logger.warning("orphan_stream_fifo_kept", path=str(path), why=str(exc))
        return False
    logger.warning("orphan_stream_fifo_removed", fifo=str(path))
    return True


def _is_starter(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"execd.starter" in f.read().split(b"\0")
    except OSError:
        return False


def _listdir(path: os.PathLike[str]) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []
