"""Job hooks during a real job: PREPARE_JOB, UPDATE_JOB_INFO and JOB_EXIT (seed 003).

HTCondor's starter runs these; in execd the daemon does, for the job's starter:
- PREPARE_JOB edits the job ad, which must happen before the starter's spec (Cmd, Args,
  Env, Iwd, In/Out/Err, KillSig) is built from it, and the daemon holds the ad as a
  ClassAd; the starter reads only a JSON spec and stays free of classad2 (the per-job
  memory budget is a benchmark target).
- Every hook then goes through the one asyncio runner (execd.hooks.runner): its own
  process group, a timeout that kills it, stderr to the daemon's log, and the event
  loop never waits on it. The starter's loop is a sigtimedwait over the job's signals;
  hooks there would share its SIGCHLD and block its measurements.
- Hooks still run as the job's user (the same choice the starter makes: Owner, then
  SLOT<N>_USER, then nobody; never root), with the job's usage from the starter's
  status file added to the ad.
The decisions themselves (keyword choice, HookStatusCode, exit arguments) live in
execd.hooks.job_hooks.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from execd import log
from execd.classads import ClassAdError, new_ad, parse_expr
from execd.config.settings import Settings
from execd.errors import ExecdError
from execd.hooks import job_hooks
from execd.hooks.runner import run_hook
from execd.starter.report import whole_seconds
from execd.starter.sandbox import resolve_user
from execd.starter.spec import StarterSpec

__all__ = ["JobHookConfig", "JobHooks", "exit_argument", "job_hook_config", "job_hooks_for"]

logger = log.get_logger("job_hooks")

JOB_HOOKS = ("PREPARE_JOB", "UPDATE_JOB_INFO", "JOB_EXIT")
ALL_HOOKS = ("FETCH_WORK", "REPLY_FETCH", "EVICT_CLAIM", *JOB_HOOKS)
DEFAULT_TIMEOUT = 120.0  # seconds; <Keyword>_HOOK_<NAME>_TIMEOUT changes it per hook
STDERR_IN_LOG = 4096  # characters of a hook's stderr that go into one log event
HOOK_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
HOLD_PREPARE_JOB_FAILED = job_hooks.HOLD_HOOK_PREPARE_JOB_FAILURE


@dataclass(frozen=True)
class JobHookConfig:
    keyword: str
    paths: dict[str, str]  # PREPARE_JOB / UPDATE_JOB_INFO / JOB_EXIT -> program
    timeouts: dict[str, float]
    initial_update: float  # STARTER_INITIAL_UPDATE_INTERVAL
    update_interval: float  # STARTER_UPDATE_INTERVAL


def hook_path(settings: Settings, keyword: str, hook: str) -> str | None:
    return settings.text(f"{keyword}_HOOK_{hook}")


def hook_timeout(settings: Settings, keyword: str, hook: str) -> float:
    value = settings.get_float(f"{keyword}_HOOK_{hook}_TIMEOUT")
    return value if value is not None and value > 0 else DEFAULT_TIMEOUT


def job_hook_config(settings: Settings, job_keyword: str | None) -> JobHookConfig | None:
    """The keyword's hooks for one job (STARTER_JOB_HOOK_KEYWORD, then the job's
    HookKeyword if any hook is defined for it, then STARTER_DEFAULT_JOB_HOOK_KEYWORD)."""
    configured = set()
    if job_keyword and any(hook_path(settings, job_keyword, h) for h in ALL_HOOKS):
        configured.add(job_keyword)
    keyword = job_hooks.select_keyword(
        job_keyword,
        settings.text("STARTER_DEFAULT_JOB_HOOK_KEYWORD"),
        settings.text("STARTER_JOB_HOOK_KEYWORD"),
        configured,
    )
    if not keyword:
        return None
    paths = {h: p for h in JOB_HOOKS if (p := hook_path(settings, keyword, h))}
    if not paths:
        return None
    initial = settings.get_float("STARTER_INITIAL_UPDATE_INTERVAL")
    interval = settings.get_float("STARTER_UPDATE_INTERVAL")
    return JobHookConfig(
        keyword=keyword,
        paths=paths,
        timeouts={h: hook_timeout(settings, keyword, h) for h in paths},
        initial_update=initial if initial is not None and initial >= 0 else 8.0,
        update_interval=interval if interval is not None and interval > 0 else 300.0,
    )


def ad_text(ad: dict[str, Any]) -> str:
    """The ad in the old ClassAd syntax HTCondor gives hooks on stdin (`Name = value`)."""
    return str(new_ad(ad).printOld())


def exit_argument(report: dict[str, Any], *, evicted: bool = False) -> str:
    """JOB_EXIT's argument: hold, evict (the daemon ended it: EVICTED, or the starter's
    report says so), or exit (on its own). `remove` needs a schedd's condor_rm, which a
    lone execd never receives."""
    reason = report.get("ExitReason")
    if reason == "held" or "HoldReasonCode" in report:
        return "hold"
    if evicted or reason in ("soft_killed", "hard_killed", "vacated", "evicted"):
        return "evict"
    return "exit"


def apply_edits(ad: dict[str, Any], edits: dict[str, str]) -> list[str]:
    """PREPARE_JOB's `Name = expression` lines into the job ad; literals as values.
    Returns the names of lines that were not valid expressions (left out)."""
    bad = []
    for name, text in edits.items():
        try:
            expr = parse_expr(text)
        except ClassAdError:
            bad.append(name)
            continue
        value = expr.eval()
        ad[name] = value if isinstance(value, bool | int | float | str) else str(expr)
    return bad


class JobHooks:
    """The job hooks of one job, run as the job's user, each logged with its stderr."""

    def __init__(self, config: JobHookConfig, *, user: tuple[int, int] | None, job_id: str,
                 slot: str) -> None:
        self.config = config
        self.user = user
        self.job_id = job_id
        self.slot = slot

    async def run(self, hook: str, ad: dict[str, Any], args: tuple[str, ...] = ()
                  ) -> job_hooks.HookResult | None:
        """Run one hook with AD on stdin; None when it is not configured."""
        path = self.config.paths.get(hook)
        if path is None:
            return None
        lines: list[str] = []
        try:
            stdin = ad_text(ad).encode()
        except (ClassAdError, TypeError, ValueError) as exc:
            logger.error("job_hook_bad_ad", hook=hook, job=self.job_id, error=str(exc))
            return job_hooks.HookResult(1, "", str(exc))
        started = time.monotonic()
        result = await run_hook([path, *args], on_line=lines.append,
                                timeout=self.config.timeouts[hook], env=HOOK_ENV, cwd="/",
                                stdin=stdin, user=self.user)
        fields: dict[str, Any] = {
            "hook": hook, "keyword": self.config.keyword, "job": self.job_id,
            "slot": self.slot, "path": path, "args": list(args),
            "seconds": round(time.monotonic() - started, 3),
        }
        if result.stderr:
            fields["stderr"] = result.stderr[-STDERR_IN_LOG:]
        if result.start_error is not None:
            logger.error("job_hook_failed", why=result.start_error, **fields)
            return job_hooks.HookResult(1, "", result.start_error)
        if result.timed_out:
            logger.error("job_hook_failed", why="timed out", **fields)
        elif result.signal is not None:
            logger.warning("job_hook_ran", signal=result.signal, **fields)
        else:
            level = logger.info if result.exit_code == 0 else logger.warning
            level("job_hook_ran", exit_code=result.exit_code, **fields)
        status = result.exit_code if result.exit_code is not None else -(result.signal or 9)
        return job_hooks.HookResult(status, "\n".join(lines), result.stderr)

    async def prepare(self, ad: dict[str, Any]) -> job_hooks.PrepareOutcome | None:
        """PREPARE_JOB: awaited before the job starts; edits go into AD when it may run."""
        result = await self.run("PREPARE_JOB", ad)
        if result is None:
            return None
        outcome = job_hooks.prepare_job_outcome(result)
        if outcome.action == "run":
            bad = apply_edits(ad, outcome.edits)
            if bad:
                logger.warning("job_hook_edits_skipped", hook="PREPARE_JOB", job=self.job_id,
                               attributes=bad)
        logger.info("job_prepared", job=self.job_id, slot=self.slot, action=outcome.action,
                    code=outcome.code, message=outcome.message,
                    edited=sorted(outcome.edits) if outcome.action == "run" else [])
        return outcome

    async def update_loop(self, current_ad: Callable[[], dict[str, Any]]) -> None:
        """UPDATE_JOB_INFO after the initial interval, then every interval, until
        cancelled. Not awaited by anything: a run still going when the next is due is
        left alone and that turn skipped."""
        if "UPDATE_JOB_INFO" not in self.config.paths:
            return
        started = time.monotonic()
        last: float | None = None
        running: asyncio.Task[Any] | None = None
        try:
            while True:
                due = job_hooks.next_update_time(started, last, self.config.initial_update,
                                                 self.config.update_interval)
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                last = due
                if running is None or running.done():
                    running = asyncio.ensure_future(self.run("UPDATE_JOB_INFO", current_ad()))
        finally:
            if running is not None and not running.done():
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)

    async def job_exit(self, ad: dict[str, Any], report: dict[str, Any], *,
                       evicted: bool = False) -> None:
        """JOB_EXIT, awaited before the daemon goes on (as HTCondor's starter does)."""
        await self.run("JOB_EXIT", ad, (exit_argument(report, evicted=evicted),))


def status_attributes(status_path: str | None, started_wall: float) -> dict[str, Any]:
    """What UPDATE_JOB_INFO adds to the ad: the starter's latest measurements, CPU in
    whole seconds and the largest resident set, as in condor_starter's job updates (its
    hooks read the same ad)."""
    attrs: dict[str, Any] = {"JobStartDate": int(started_wall)}
    if status_path:
        try:
            with open(status_path, encoding="utf-8") as f:
                status = json.load(f)
        except (OSError, ValueError):
            status = {}
        if isinstance(status, dict):
            for key in ("JobState", "JobPid", "ImageSize", "ResidentSetSize"):
                if isinstance(status.get(key), int | float | str):
                    attrs[key] = status[key]
            for key in ("RemoteSysCpu", "RemoteUserCpu"):
                if isinstance(status.get(key), int | float):
                    attrs[key] = whole_seconds(status[key])
            if isinstance(status.get("NumProcesses"), int):
                attrs["NumPids"] = status["NumProcesses"]
    attrs.setdefault("JobState", "Running")
    return attrs


def exit_attributes(report: dict[str, Any], wall_seconds: float) -> dict[str, Any]:
    """What JOB_EXIT adds: ExitReason, ExitBySignal, ExitSignal/ExitCode, the run's time."""
    by_signal = bool(report.get("ExitBySignal"))
    attrs: dict[str, Any] = {
        "ExitReason": str(report.get("HoldReason") or report.get("ExitReason") or "exited"),
        "ExitBySignal": by_signal,
        "JobDuration": round(wall_seconds, 3),
    }
    if by_signal and isinstance(report.get("ExitSignal"), int):
        attrs["ExitSignal"] = report["ExitSignal"]
    elif isinstance(report.get("ExitCode"), int):
        attrs["ExitCode"] = report["ExitCode"]
    return attrs


def job_hooks_for(settings: Settings, ad: dict[str, Any], spec: StarterSpec) -> JobHooks | None:
    """The hooks for a job about to start, run as the user its starter will pick."""
    keyword = ad.get("HookKeyword")
    config = job_hook_config(settings, keyword if isinstance(keyword, str) else None)
    if config is None:
        return None
    user = None
    if os.geteuid() == 0:
        try:
            picked = resolve_user(spec, 0)
        except ExecdError as exc:
            logger.error("job_hook_no_user", job=spec.job_id, error=str(exc))
            return None
        user = (picked.uid, picked.gid)
    return JobHooks(config, user=user, job_id=spec.job_id, slot=spec.slot_name)
