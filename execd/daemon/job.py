"""A job on this node as the daemon tracks it: its claim, its starter, its outcome, how
it is being evicted or suspended, and (pool jobs) what the startd keeps of its ad for
the STARTD_HISTORY record. execd.daemon.jobs.JobManager holds them; the state store
(execd.daemon.store) keeps what a restart needs of each.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from execd.claims.ids import ClaimId
from execd.hooks import job_hook_runs
from execd.starter.launcher import StarterHandle

if TYPE_CHECKING:
    from execd.policy.slot import Slot


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
    vacate_reason: tuple[str, int, int] | None = None  # why, for its shadow (VacateReason*)
    preemption_badput: bool = False  # its claim's, from its eviction or end (stored)
    hooks: job_hook_runs.JobHooks | None = None  # its UPDATE_JOB_INFO/JOB_EXIT hooks
    exit_fifo: int | None = None  # read end of the starter's job-exit FIFO, while open
    evicting: str | None = None  # "vacating" or "killing" once a kill signal went out
    # Pool jobs: the starter waits for the shadow's input transfer. The gate's result is
    # what the spec takes from the shadow's conversation (cmd, args, env, stdio, the
    # sandbox), or None: never start it.
    gate: asyncio.Future[dict[str, Any] | None] | None = None
    overrides: dict[str, Any] | None = None
    state_changed: asyncio.Event = field(default_factory=asyncio.Event)  # (un)suspended
    # The startd's copy of the job ad for its STARTD_HISTORY record (execd.daemon.
    # ended_job_ad): a pool job's activation ad and the updates its starter side sent
    # (as old-syntax text); the bytes its transfers moved. `history_deferred`: its
    # shadow conversation writes the record at its end; `history_written`: done.
    claim_ad: dict[str, str] | None = None
    updates: dict[str, str] = field(default_factory=dict)
    transferred: tuple[int, int] | None = None
    history_deferred: bool = False
    history_written: bool = False


def preemption_badput(job: Job, slot: Slot | None) -> bool:
    """`job`'s BadputCausedByPreemption: what was decided for it, or its claim's flag on
    `slot` while the slot still holds that claim (not a later claim's)."""
    return job.preemption_badput or (
        slot is not None and slot.claim is not None and slot.claim.id == job.claim
        and slot.preemption_badput)
