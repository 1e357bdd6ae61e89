"""The daemon following one running starter: seed 002's policy each poll, the slot after.

Every CGROUP_POLLING_INTERVAL the starter rewrites its status file (its measurements,
JobState, EnteredCurrentState). The daemon reads it, evaluates STARTER_EVICT /
STARTER_WANT_VACATE / STARTER_KILL (execd/starter/policy.py) and carries the decision
out through the starter's own controls: a soft kill (the job's KillSig, then the hard
kill after the vacate time) or a hard kill of the whole cgroup. When the starter has
gone, a report naming a cgroup that could not be emptied marks the slot broken.

Runs as one task per job, owned by the JobManager; it never raises into it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from execd import log
from execd.aio import wait_event
from execd.classads import new_ad
from execd.config.settings import Settings
from execd.errors import ExecdError
from execd.starter.policy import StarterAction, StarterPolicy, starter_decision

logger = log.get_logger("starter_policy")


class StarterControls(Protocol):
    def soft_kill(self) -> None: ...
    def hard_kill(self) -> None: ...


class FollowedJob(Protocol):
    """What the follower needs of job.Job."""

    job_id: str
    slot: str
    ad: dict[str, Any]
    report: dict[str, Any] | None
    done: asyncio.Event


def starter_policy(settings: Settings) -> StarterPolicy:
    return StarterPolicy(
        evict=settings.get_str("STARTER_EVICT"),
        want_vacate=settings.get_str("STARTER_WANT_VACATE"),
        kill=settings.get_str("STARTER_KILL"),
    )


def read_status(path: str) -> dict[str, Any] | None:
    """The starter's latest measurements; None before the first one (or a torn read)."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass
class StarterFollower:
    job: FollowedJob
    controls: StarterControls
    status_path: str
    policy: StarterPolicy
    memory_mb: int
    interval: float
    mark_broken: Callable[[str, str], None]
    acted: StarterAction = StarterAction.NONE
    target: Any = None  # the job ad as a ClassAd, built on first use

    async def run(self) -> None:
        try:
            if self.policy.evict is not None or self.policy.kill is not None:
                while not await self._done_within(self.interval):
                    self.poll()
            await self.job.done.wait()
            self.after_exit()
        except (ExecdError, OSError, ValueError, TypeError) as exc:
            logger.error("starter_follow_failed", slot=self.job.slot, job=self.job.job_id,
                         error=str(exc))

    async def _done_within(self, seconds: float) -> bool:
        return await wait_event(self.job.done, seconds)  # cancel-safe, unlike wait_for

    def poll(self, now: int | None = None) -> StarterAction:
        """One evaluation of the starter policy against the latest status; acts once."""
        status = read_status(self.status_path)
        if status is None:
            return StarterAction.NONE
        moment = int(time.time()) if now is None else now
        if self.target is None:
            self.target = new_ad(self.job.ad)
        action = starter_decision(self.policy, self.target, status, self.memory_mb, moment)
        if action is StarterAction.NONE or action is self.acted:
            return action
        if action is StarterAction.VACATE and self.acted is StarterAction.KILL:
            return action  # never step back from a hard kill
        self.acted = action
        logger.info("starter_policy_evict", slot=self.job.slot, job=self.job.job_id,
                    action=action.value, job_state=status.get("JobState"),
                    image_size_kb=status.get("ImageSize"),
                    processes=status.get("NumProcesses"))
        if action is StarterAction.VACATE:
            self.controls.soft_kill()
        else:
            self.controls.hard_kill()
        return action

    def after_exit(self) -> None:
        report = self.job.report or {}
        reason = report.get("SlotBrokenReason")
        if reason:
            self.mark_broken(self.job.slot, str(reason))


def follow_starter(
    tasks: set[asyncio.Task[None]],
    job: FollowedJob,
    controls: StarterControls,
    spec: Any,
    *,
    settings: Settings,
    mark_broken: Callable[[str, str], None],
) -> None:
    """Start the follower of one starter as a task in `tasks` (its owner's set)."""
    follower = StarterFollower(
        job=job,
        controls=controls,
        status_path=spec.status_path or "",
        policy=starter_policy(settings),
        memory_mb=spec.memory_mb,
        interval=spec.polling_interval,
        mark_broken=mark_broken,
    )
    task = asyncio.get_running_loop().create_task(follower.run())
    tasks.add(task)
    task.add_done_callback(tasks.discard)

