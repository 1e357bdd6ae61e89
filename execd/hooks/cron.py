"""The startd cron manager: runs daemon ClassAd hook jobs and merges their output.

The daemon owns one CronManager and runs `CronManager.run()` in its task group. Each job
in STARTD_CRON_JOBLIST gets a task that runs its program as a subprocess (execd.hooks
.runner) according to its mode:

- Periodic: every PERIOD seconds. A run still going at its next period is killed (a
  hung hook must not pile up); with KILL the next run starts at once, without KILL it
  waits for the period after. (HTCondor without KILL lets the old run continue; execd
  kills it either way so that a hang always shows in the log.)
- WaitForExit: started again PERIOD seconds after each exit; its ads are published as
  each '-' line arrives, so a job that never exits can stream updates.
- OneShot: once at start, and again on reconfig with RECONFIG_RERUN.
- OnDemand: only when `run_now(name)` is called.

No more jobs run at once than their JOB_LOADs allow within STARTD_CRON_MAX_JOB_LOAD
(a job heavier than the limit still runs, alone). CONDITION, when set, is evaluated
against the machine (the first slot ad) before each run; false skips the run.

Published ads are merged into slot ads (execd.hooks.cron_merge); `slot_attributes()`
returns, per slot name, the attributes to put into that slot's ad (name -> expression
text), and `on_update` is called whenever a job publishes, saying which slots changed
and whether an update should go out at once (update:true|false, else AUTOPUBLISH).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from execd import log
from execd.classads import evaluate, is_true, parse_expr, to_number
from execd.hooks.cron_config import CronJobSpec, CronMode, CronSettings
from execd.hooks.cron_merge import TARGETING_ATTRS, merge_into_slots, slot_matcher
from execd.hooks.cron_output import CronAd, CronOutputParser
from execd.hooks.runner import HookResult, run_hook

__all__ = ["CronJobExit", "CronManager", "CronUpdate"]



def _log() -> Any:
    # looked up per event: a logger bound at import keeps the configuration of that time
    return log.get_logger("execd.hooks.cron")


_TARGETING_LOWER = frozenset(a.lower() for a in TARGETING_ATTRS)
_RETRY_DELAY = 1.0  # seconds before restarting a WaitForExit job that failed quickly


@dataclass(frozen=True)
class CronUpdate:
    job: str
    ad: str  # the ad's full name (job name, joined with its tag)
    changed_slots: frozenset[str]  # slots whose cron attributes changed (LastUpdate aside)
    publish_now: bool  # send slot ads at once (update:true, or AUTOPUBLISH says so)


@dataclass(frozen=True)
class CronJobExit:
    job: str
    result: HookResult


class _Load:
    """Admission by JOB_LOAD within STARTD_CRON_MAX_JOB_LOAD."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.running = 0.0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def slot(self, load: float) -> Any:
        async with self._changed:
            await self._changed.wait_for(
                lambda: self.running == 0 or self.running + load <= self.limit + 1e-9
            )
            self.running += load
        try:
            yield
        finally:
            async with self._changed:
                self.running = max(0.0, self.running - load)
                self._changed.notify_all()


class CronManager:
    """Runs the startd cron jobs of a CronSettings and keeps their merged output."""

    def __init__(
        self,
        settings: CronSettings,
        *,
        slot_ads: Callable[[], Mapping[str, Any]],
        on_update: Callable[[CronUpdate], None] | None = None,
        on_exit: Callable[[CronJobExit], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._slot_ads = slot_ads
        self._on_update = on_update
        self._on_exit = on_exit
        self._clock = clock
        self._load = _Load(settings.max_job_load)
        self._specs: dict[str, CronJobSpec] = {s.name: s for s in settings.jobs}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pids: dict[str, int] = {}
        self._demand: dict[str, asyncio.Event] = {}
        self._ads: dict[str, dict[str, dict[str, str]]] = {}  # job -> ad name -> attrs
        self._per_job: dict[str, dict[str, dict[str, str]]] = {}  # job -> slot -> attrs
        self._merged_for: dict[str, frozenset[str]] = {}  # job -> slot names it was merged into
        self._metrics: dict[tuple[str, str], float] = {}  # (slot, attr) -> accumulated
        self._merged: dict[str, dict[str, str]] = {}
        self._dirty = False  # merged lazily: a publish costs only its own job's merge
        self._group: asyncio.TaskGroup | None = None

    # -- what the daemon reads ----------------------------------------------------
    def slot_attributes(self) -> dict[str, dict[str, str]]:
        """Per slot name, the cron attributes for its ad (name -> expression text)."""
        self._refresh()
        return {slot: dict(attrs) for slot, attrs in self._merged.items()}

    def apply_to(self, slot_name: str, slot_ad: Any) -> None:
        """Put SLOT_NAME's cron attributes into SLOT_AD (a ClassAd)."""
        self._refresh()
        for name, text in self._merged.get(slot_name, {}).items():
            slot_ad[name] = parse_expr(text)

    @property
    def running_load(self) -> float:
        return self._load.running

    # -- lifecycle --------------------------------------------------------------------
    async def run(self) -> None:
        """Run every job until cancelled; cancelling kills the hooks still running."""
        async with asyncio.TaskGroup() as group:
            self._group = group
            for spec in self._specs.values():
                self._start(spec)
            await asyncio.Event().wait()  # hold the group open until cancelled

    def run_now(self, name: str) -> None:
        """Ask an OnDemand job to run (ignored, with a log event, for unknown names)."""
        event = self._demand.get(name)
        if event is None:
            _log().warning("cron_run_now_unknown_job", job=name)
            return
        event.set()

    def reconfigure(self, settings: CronSettings) -> None:
        """Apply a new (already validated) CronSettings: diff and restart what changed."""
        old = self._specs
        self._settings = settings
        self._load.limit = settings.max_job_load
        self._specs = {s.name: s for s in settings.jobs}
        for name, spec in old.items():
            if self._specs.get(name) != spec:
                self._stop(name)
                if name not in self._specs:
                    self._drop_output(name)
        for name, spec in self._specs.items():
            if old.get(name) != spec:
                self._start(spec)
            elif spec.reconfig and name in self._pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(self._pids[name], signal.SIGHUP)
            elif spec.mode is CronMode.ONE_SHOT and spec.reconfig_rerun:
                self._stop(name)
                self._start(spec)
        _log().info("cron_reconfigured", jobs=sorted(self._specs))

    def _start(self, spec: CronJobSpec) -> None:
        if self._group is None:
            return  # run() starts it
        if spec.mode is CronMode.ON_DEMAND:
            self._demand.setdefault(spec.name, asyncio.Event())
        self._tasks[spec.name] = self._group.create_task(
            self._job_loop(spec), name=f"cron:{spec.name}"
        )

    def _stop(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            task.cancel()
        self._demand.pop(name, None)

    # -- one job ------------------------------------------------------------------------
    async def _job_loop(self, spec: CronJobSpec) -> None:
        loop = asyncio.get_running_loop()
        if spec.mode is CronMode.PERIODIC:
            next_start = loop.time()
            while True:
                result = await self._run_once(spec, timeout=spec.period)
                next_start += spec.period
                if result is not None and result.timed_out and spec.kill:
                    next_start = loop.time()
                next_start = max(next_start, loop.time())
                await asyncio.sleep(next_start - loop.time())
        elif spec.mode is CronMode.WAIT_FOR_EXIT:
            while True:
                started = loop.time()
                result = await self._run_once(spec, timeout=None)
                delay = spec.period
                if result is None or (not result.ok and loop.time() - started < _RETRY_DELAY):
                    delay = max(delay, _RETRY_DELAY)  # no tight restart loop on a broken hook
                await asyncio.sleep(delay)
        elif spec.mode is CronMode.ONE_SHOT:
            await self._run_once(spec, timeout=None)
        else:
            demand = self._demand.setdefault(spec.name, asyncio.Event())
            while True:
                await demand.wait()
                demand.clear()
                await self._run_once(spec, timeout=None)

    def _condition_holds(self, spec: CronJobSpec) -> bool:
        if spec.condition is None:
            return True
        ads = list(self._slot_ads().values())
        return is_true(evaluate(spec.condition, ads[0] if ads else None))

    async def _run_once(self, spec: CronJobSpec, *, timeout: float | None) -> HookResult | None:
        if not self._condition_holds(spec):
            _log().debug("cron_job_condition_false", job=spec.name, condition=spec.condition)
            return None
        parser = CronOutputParser()
        run_slots: list[dict[str, Any]] = []  # the slot ads, read once per run

        def slots() -> dict[str, Any]:
            if not run_slots:
                run_slots.append(self._slots_for(spec))
            return run_slots[0]

        def on_line(line: str) -> None:
            ad = parser.feed_line(line)
            if ad is not None:
                self._publish(spec, ad, slots())

        def on_start(pid: int) -> None:
            self._pids[spec.name] = pid

        env = {**os.environ, **dict(spec.env)}
        async with self._load.slot(spec.job_load):
            try:
                result = await run_hook(
                    [spec.executable, *spec.args], on_line=on_line, timeout=timeout,
                    env=env, cwd=spec.cwd, on_start=on_start,
                )
            finally:
                self._pids.pop(spec.name, None)
        last = parser.finish()
        if last is not None and not result.timed_out:
            self._publish(spec, last, slots())
        self._log_result(spec, result, parser, timeout)
        if self._on_exit is not None:
            self._on_exit(CronJobExit(spec.name, result))
        return result

    def _log_result(
        self, spec: CronJobSpec, result: HookResult, parser: CronOutputParser,
        timeout: float | None,
    ) -> None:
        for bad in parser.bad_lines:
            _log().warning("cron_output_bad_line", job=spec.name, line_number=bad.number,
                         line=bad.text, reason=bad.reason)
        if result.start_error is not None:
            _log().error("cron_job_start_failed", job=spec.name, executable=spec.executable,
                       error=result.start_error)
        elif result.timed_out:
            _log().warning("cron_job_killed_timeout", job=spec.name, timeout_s=timeout,
                         stderr=result.stderr)
        elif not result.ok:
            if self._settings.log_non_zero_exit:
                _log().warning("cron_job_exit_non_zero", job=spec.name, exit_code=result.exit_code,
                             signal=result.signal, stderr=result.stderr,
                             unparsed=[b.text for b in parser.bad_lines])
            else:
                _log().info("cron_job_exit_non_zero", job=spec.name, exit_code=result.exit_code,
                          signal=result.signal)
        elif result.stderr:
            _log().debug("cron_job_stderr", job=spec.name, stderr=result.stderr)

    # -- output ------------------------------------------------------------------------
    def _publish(self, spec: CronJobSpec, ad: CronAd, slots: dict[str, Any]) -> None:
        name = ad.full_name(spec.name)
        attrs = {
            key if key.lower() in _TARGETING_LOWER else spec.prefix + key: value
            for key, value in ad.attrs.items()
        }
        stamp_attr = f"{spec.prefix}LastUpdate"
        stamp = str(int(self._clock()))
        previous = self._ads.get(spec.name, {}).get(name)
        attrs[stamp_attr] = stamp
        self._ads.setdefault(spec.name, {})[name] = attrs
        if previous is not None and not spec.metrics and self._merged_for.get(spec.name) \
                == frozenset(slots) and {**previous, stamp_attr: stamp} == attrs:
            # the same output into the same slots (the usual case): only LastUpdate moves,
            # so the merge, which evaluates targeting per slot, is not redone
            for slot_attrs in self._per_job.get(spec.name, {}).values():
                if stamp_attr in slot_attrs:
                    slot_attrs[stamp_attr] = stamp
            changed: frozenset[str] = frozenset()
        else:
            self._accumulate_metrics(spec, attrs, slots)
            old = self._per_job.get(spec.name, {})
            new = merge_into_slots(list(self._ads[spec.name].values()), slots)
            self._per_job[spec.name] = new
            self._merged_for[spec.name] = frozenset(slots)
            changed = _changed_slots(old, new, ignore=stamp_attr)
        self._dirty = True
        if ad.update is not None:
            publish_now = ad.update
        else:
            mode = self._settings.autopublish
            publish_now = mode == "always" or (mode == "if_changed" and bool(changed))
        if self._on_update is not None:
            self._on_update(CronUpdate(spec.name, name, changed, publish_now))

    def _slots_for(self, spec: CronJobSpec) -> dict[str, Any]:
        slots = dict(self._slot_ads())
        if not spec.slots:
            return slots
        wanted = set(spec.slots)
        return {
            n: ad for n, ad in slots.items()
            if to_number(evaluate("SlotID", ad)) in wanted
        }

    def _accumulate_metrics(
        self, spec: CronJobSpec, attrs: dict[str, str], slots: Mapping[str, Any]
    ) -> None:
        """SUM:<R> adds each run's Uptime<R>Seconds; PEAK:<R> keeps Uptime<R>PeakUsage's max."""
        for kind, resource in spec.metrics:
            attr = spec.prefix + (
                f"Uptime{resource}Seconds" if kind == "SUM" else f"Uptime{resource}PeakUsage"
            )
            text = attrs.get(attr)
            value = to_number(evaluate(text)) if text is not None else None
            if value is None:
                continue
            matches = slot_matcher(attrs)
            for slot_name, slot_ad in slots.items():
                if not matches(slot_ad):
                    continue
                key = (slot_name, attr)
                old = self._metrics.get(key)
                if old is not None:
                    value_now = old + value if kind == "SUM" else max(old, value)
                else:
                    value_now = value
                self._metrics[key] = value_now

    def _remerge(self) -> None:
        merged: dict[str, dict[str, str]] = {}
        for job in self._specs:
            for slot, attrs in self._per_job.get(job, {}).items():
                merged.setdefault(slot, {}).update(attrs)
        for (slot, attr), value in self._metrics.items():
            if slot in merged:
                merged[slot][attr] = repr(value)
        self._merged = merged

    def _refresh(self) -> None:
        if self._dirty:
            self._dirty = False
            self._remerge()

    def _drop_output(self, job: str) -> None:
        self._ads.pop(job, None)
        self._per_job.pop(job, None)
        self._merged_for.pop(job, None)
        self._dirty = True


def _changed_slots(
    old: Mapping[str, Mapping[str, str]], new: Mapping[str, Mapping[str, str]], ignore: str
) -> frozenset[str]:
    """Slots whose attributes from one job differ (its LastUpdate aside)."""
    changed = set()
    for slot in set(old) | set(new):
        before, after = old.get(slot, {}), new.get(slot, {})
        if before == after:
            continue
        if {k: v for k, v in before.items() if k != ignore} != {
            k: v for k, v in after.items() if k != ignore
        }:
            changed.add(slot)
    return frozenset(changed)
