"""Fetching work through hooks (seed 003, "Job Hooks That Fetch Work").

Each slot with a keyword and a <Keyword>_HOOK_FETCH_WORK asks the hook for work when
FetchWorkDelay has passed since its last fetch completed, and again as soon as a
fetched job ends. The hook gets the slot ad on stdin and prints a job ad, or nothing.
A fetched job claims an Unclaimed slot when START is true (a d-slot is carved on a
partitionable slot), reuses the slot's idle fetched claim, or preempts a claimed slot
by RANK; anything else rejects it. REPLY_FETCH (accept/reject) and EVICT_CLAIM are
advisory: started, never awaited. When the hook has no more work for an idle fetched
claim, the claim is released and EVICT_CLAIM runs. The fetch hooks run with the
daemon's privileges (HTCondor: the startd's); the job's own hooks run as the job's user
under the keyword inserted as HookKeyword (execd.hooks.job_hook_runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from execd import log
from execd.aio import wait_event
from execd.daemon.control import ControlError
from execd.hooks.fetch_work import (
    FetchedJobError,
    FetchHooks,
    fetch_hooks,
    fetch_work_delay,
    fetched_job,
    two_ads,
)
from execd.hooks.job_hook_runs import HOOK_ENV, STDERR_IN_LOG, ad_text
from execd.hooks.runner import run_hook

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("fetch_work")

ADVISORY_TIMEOUT = 60.0  # REPLY_FETCH and EVICT_CLAIM: nobody waits, but none lingers
IDLE_RECHECK = 60.0  # seconds between passes when nothing else wakes the worker
PREEMPT_WAIT = 600.0  # how long a RANK-preempting fetched claim waits for Claimed/Idle
SHUTDOWN_ADVISORY_WAIT = 2.0  # seconds the advisory hooks get when the daemon stops


@dataclass
class FetchedClaim:
    slot: str  # where the claim is (a d-slot when carved from a p-slot)
    claim_id: str  # secret: never logged
    hooks: FetchHooks
    job: dict[str, Any] | None = None  # the fetched job now running on it
    job_id: str | None = None
    last_job: dict[str, Any] | None = None  # for EVICT_CLAIM's stdin


@dataclass
class FetchTimes:
    """One slot's fetching record. It belongs to the engine's Slot object it was made
    for: a later d-slot that reuses the name (the lowest freed number is reused) starts
    afresh, as condor_startd's new Resource does (0, 0, -1 until it fetches)."""

    slot: object  # the engine's Slot these times are of
    spawned: int = 0  # LastFetchWorkSpawned (wall seconds, 0: never)
    completed: int = 0  # LastFetchWorkCompleted
    next_delay: int = -1  # NextFetchWorkDelay (-1: never evaluated)
    ended: float = float("-inf")  # monotonic time the last fetch ended (paces the next)


class FetchWorker:
    """The fetch-work loop; the daemon's TaskGroup owns `run`."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.times: dict[str, FetchTimes] = {}  # slot name -> its current slot's record
        self.fetching: set[str] = set()
        self.claims: dict[str, FetchedClaim] = {}  # slot -> its fetched claim
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.advisory: set[asyncio.Task[None]] = set()  # REPLY_FETCH, EVICT_CLAIM runs

    # -- which slots fetch, and when --------------------------------------------------
    def sources(self) -> dict[str, FetchHooks]:
        settings = self.daemon.settings
        out: dict[str, FetchHooks] = {}
        for name, slot in self.daemon.engine.slots.items():
            if slot.dynamic and name not in self.claims:
                continue  # a d-slot fetches only for the fetched claim it holds
            hooks = fetch_hooks(settings, name)
            if hooks is not None:
                out[name] = hooks
        return out

    def _ads_by_name(self) -> dict[str, Any]:
        return {str(ad["Name"]).split("@")[0]: ad for ad in self.daemon.ads()}

    def slot_ad(self, name: str) -> Any:
        return self._ads_by_name().get(name)

    def delay(self, name: str, slot_ad: Any) -> float:
        claim = self.claims.get(name)
        job = None
        if claim is not None and claim.job is not None:
            from execd.classads import new_ad  # noqa: PLC0415 - only with a running fetched job

            job = new_ad(claim.job)
        delay = fetch_work_delay(self.daemon.settings.text("FetchWorkDelay"), slot_ad, job)
        self._times(name).next_delay = int(delay)
        return delay

    def _current(self, name: str) -> FetchTimes | None:
        """The name's record if it is of the slot that has the name now."""
        times = self.times.get(name)
        if times is not None and times.slot is not self.daemon.engine.slots.get(name):
            del self.times[name]  # of a deleted d-slot
            return None
        return times

    def _times(self, name: str) -> FetchTimes:
        times = self._current(name)
        if times is None:
            times = self.times[name] = FetchTimes(self.daemon.engine.slots.get(name))
        return times

    def attributes(self, name: str) -> dict[str, int]:
        """What a slot's ad says of its fetching, as condor_startd's: when its hook last
        started and last finished (wall seconds, 0: never) and the FetchWorkDelay last
        evaluated for it (-1: never, a slot without fetch hooks)."""
        times = self._current(name) or FetchTimes(None)
        return {"LastFetchWorkSpawned": times.spawned, "LastFetchWorkCompleted": times.completed,
                "NextFetchWorkDelay": times.next_delay}  # fmt: skip

    def poke(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        try:
            while True:
                self.wake.clear()
                self._forget_lost_claims()
                for name in [n for n in self.times if n not in self.daemon.engine.slots]:
                    del self.times[name]  # deleted d-slots' records
                now = time.monotonic()
                next_due = now + IDLE_RECHECK
                sources = self.sources()
                ads = self._ads_by_name() if sources else {}  # built once a pass
                for name, hooks in sources.items():
                    if name in self.fetching or self.daemon.stopping is not None:
                        continue
                    ad = ads.get(name)
                    if ad is None:
                        continue
                    due = self._times(name).ended + self.delay(name, ad)
                    if due <= now:
                        self.fetching.add(name)
                        self._spawn(self._fetch(name, hooks, ad))
                    else:
                        next_due = min(next_due, due)
                await wait_event(self.wake, next_due - now)  # cancel-safe, unlike wait_for
        finally:
            await self._shut_down()

    async def _shut_down(self) -> None:
        """The daemon is stopping: fetches end; fetched claims that are left are evicted
        and their EVICT_CLAIM hooks get a moment (SHUTDOWN_ADVISORY_WAIT) to run."""
        for task in list(self.tasks - self.advisory):
            task.cancel()
        for name, claim in list(self.claims.items()):
            del self.claims[name]
            logger.info("fetched_claim_evicted", slot=name, keyword=claim.hooks.keyword,
                        why="shutdown")
            self._advisory(claim.hooks, "EVICT_CLAIM", job_text=ad_text(claim.last_job or {}),
                           slot_ad=self.slot_ad(name))
        if self.advisory:
            await asyncio.wait(list(self.advisory), timeout=SHUTDOWN_ADVISORY_WAIT)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _forget_lost_claims(self) -> None:
        """A fetched claim the policy ended (vacate, PREEMPT, lease): EVICT_CLAIM."""
        for name, claim in list(self.claims.items()):
            if not self._claim_held(claim):
                del self.claims[name]
                logger.info("fetched_claim_evicted", slot=name, keyword=claim.hooks.keyword)
                self._advisory(claim.hooks, "EVICT_CLAIM", job_text=ad_text(claim.last_job or {}),
                               slot_ad=self.slot_ad(name))

    def _claim_held(self, claim: FetchedClaim) -> bool:
        if claim.claim_id not in self.daemon.jobs.claims:
            return False
        slot = self.daemon.engine.slots.get(claim.slot)
        if slot is None:
            return False
        held = [c.id.full() for c in (slot.claim, slot.preempting_claim) if c is not None]
        return claim.claim_id in held

    # -- one fetch ----------------------------------------------------------------------
    async def _fetch(self, name: str, hooks: FetchHooks, ad: Any) -> None:
        try:
            text = await self._fetch_work(name, hooks, ad)
            if text is not None:
                await self._place(name, hooks, text)
        except Exception as exc:  # a bug here is logged; the daemon and the slot go on
            logger.exception("fetch_failed", slot=name, keyword=hooks.keyword, error=str(exc))
        finally:
            times = self._times(name)
            times.ended, times.completed = time.monotonic(), int(time.time())
            self.fetching.discard(name)
            self.poke()

    async def _fetch_work(self, name: str, hooks: FetchHooks, ad: Any) -> str | None:
        lines: list[str] = []
        self._times(name).spawned = int(time.time())
        result = await run_hook([hooks.fetch_work], on_line=lines.append, timeout=hooks.timeout,
                                env=HOOK_ENV, cwd="/", stdin=ad_text_of(ad).encode())
        fields: dict[str, Any] = {"hook": "FETCH_WORK", "keyword": hooks.keyword, "slot": name}
        if result.stderr:
            fields["stderr"] = result.stderr[-STDERR_IN_LOG:]
        if result.start_error is not None or result.timed_out:
            logger.error("fetch_hook_failed", why=result.start_error or "timed out", **fields)
            return None
        text = "\n".join(lines)
        logger.info("fetch_hook_ran", exit_code=result.exit_code, work=bool(text.strip()),
                    **fields)
        if not text.strip():
            self._no_work(name)
            return None
        return text

    def _no_work(self, name: str) -> None:
        """No more work: an idle fetched claim is released (and EVICT_CLAIM told)."""
        claim = self.claims.get(name)
        slot = self.daemon.engine.slots.get(name)
        if claim is None or slot is None or claim.job is not None \
                or slot.activity.value != "Idle":
            return
        ad = self.slot_ad(name)
        del self.claims[name]
        with contextlib.suppress(ControlError):
            self.daemon.jobs.release(claim.claim_id)
        logger.info("fetched_claim_released", slot=name, keyword=claim.hooks.keyword)
        self._advisory(claim.hooks, "EVICT_CLAIM", job_text=ad_text(claim.last_job or {}),
                       slot_ad=ad)

    async def _place(self, name: str, hooks: FetchHooks, text: str) -> None:
        slot = self.daemon.engine.slots.get(name)
        if slot is None:
            return
        partitionable = slot_number_is_pslot(self.daemon, name)
        try:
            job = fetched_job(text, keyword=hooks.keyword, partitionable=partitionable)
        except FetchedJobError as exc:
            logger.error("fetched_job_rejected", slot=name, keyword=hooks.keyword, error=str(exc))
            self._reply(hooks, False, {}, name, raw=text)
            return
        claim = self.claims.get(name)
        if claim is not None and claim.job is None and slot.state.value == "Claimed" \
                and slot.activity.value == "Idle":
            self._reply(hooks, True, job, name)  # the idle fetched claim is reused
            self._activate(claim, job)
            return
        was_claimed = slot.state.value == "Claimed"
        try:
            granted = self.daemon.jobs.request_claim(name, job)
        except ControlError as exc:
            logger.info("fetched_job_refused", slot=name, keyword=hooks.keyword, why=exc.message)
            self._reply(hooks, False, job, name)
            return
        new = FetchedClaim(granted["slot"], granted["claim_id"], hooks)
        old = self.claims.get(new.slot)
        self.claims[new.slot] = new
        if old is not None:  # a fetched claim preempted by RANK: its hook is told
            logger.info("fetched_claim_evicted", slot=new.slot, keyword=old.hooks.keyword)
            self._advisory(old.hooks, "EVICT_CLAIM", job_text=ad_text(old.last_job or {}),
                           slot_ad=self.slot_ad(new.slot))
        self._times(new.slot).ended = time.monotonic()  # a carved d-slot: this fetch counts
        self._reply(hooks, True, job, new.slot)
        logger.info("fetched_job_accepted", slot=new.slot, keyword=hooks.keyword)
        if was_claimed and new.slot == name:  # preempting by RANK
            await self._wait_for_idle_claim(new)
            if self.claims.get(new.slot) is not new:
                return
        self._activate(new, job)

    async def _wait_for_idle_claim(self, claim: FetchedClaim) -> None:
        deadline = time.monotonic() + PREEMPT_WAIT
        while time.monotonic() < deadline:
            slot = self.daemon.engine.slots.get(claim.slot)
            if slot is None:
                break
            if slot.claim is not None and slot.claim.id.full() == claim.claim_id \
                    and slot.activity.value == "Idle":
                return
            # the old job is vacating; the engine has no per-claim event to await here
            await asyncio.sleep(0.2)
        self.claims.pop(claim.slot, None)

    def _activate(self, claim: FetchedClaim, job: dict[str, Any]) -> None:
        try:
            started = self.daemon.jobs.activate(claim.claim_id, dict(job))
        except ControlError as exc:
            logger.error("fetched_job_not_started", slot=claim.slot, why=exc.message)
            return
        claim.job, claim.job_id, claim.last_job = job, started["job_id"], job
        logger.info("fetched_job_started", slot=claim.slot, job=claim.job_id,
                    keyword=claim.hooks.keyword)
        self._spawn(self._await_job(claim))

    async def _await_job(self, claim: FetchedClaim) -> None:
        record = self.daemon.jobs.jobs.get(claim.job_id or "")
        if record is not None:
            await record.done.wait()
        claim.job = claim.job_id = None
        # the starter exited: fetch again for this claim at once if FetchWorkDelay allows
        self.poke()

    # -- advisory hooks -------------------------------------------------------------------
    def _reply(self, hooks: FetchHooks, accepted: bool, job: dict[str, Any], slot: str,
               raw: str | None = None) -> None:
        self._advisory(hooks, "REPLY_FETCH", job_text=raw if raw is not None else ad_text(job),
                       slot_ad=self.slot_ad(slot), args=("accept" if accepted else "reject",))

    def _advisory(self, hooks: FetchHooks, hook: str, *, job_text: str, slot_ad: Any,
                  args: tuple[str, ...] = ()) -> None:
        path = hooks.reply_fetch if hook == "REPLY_FETCH" else hooks.evict_claim
        if path is None:
            return
        stdin = two_ads(job_text, ad_text_of(slot_ad) if slot_ad is not None else "")
        task = asyncio.get_running_loop().create_task(
            self._run_advisory(hooks, hook, path, stdin, args))
        self.tasks.add(task)
        self.advisory.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(self.advisory.discard)

    async def _run_advisory(self, hooks: FetchHooks, hook: str, path: str, stdin: bytes,
                            args: tuple[str, ...]) -> None:
        result = await run_hook([path, *args], on_line=lambda _line: None,
                                timeout=ADVISORY_TIMEOUT, env=HOOK_ENV, cwd="/", stdin=stdin)
        fields: dict[str, Any] = {"hook": hook, "keyword": hooks.keyword, "args": list(args)}
        if result.stderr:
            fields["stderr"] = result.stderr[-STDERR_IN_LOG:]
        if result.start_error is not None or result.timed_out:
            logger.error("fetch_hook_failed", why=result.start_error or "timed out", **fields)
        else:
            logger.info("fetch_hook_ran", exit_code=result.exit_code, **fields)


def ad_text_of(ad: Any) -> str:
    """A classad2 ad in the old syntax, as hooks read it."""
    return str(ad.printOld())


def slot_number_is_pslot(daemon: Daemon, name: str) -> bool:
    if "_" in name:
        return False
    digits = name.removeprefix("slot")
    return digits.isdigit() and int(digits) in daemon.node.slots.partitionable
