"""Startd cron job definitions from the configuration (STARTD_CRON_<name>_*).

Each name in STARTD_CRON_JOBLIST becomes a CronJobSpec; a bad value (an unknown mode,
a period that is not a duration, a missing executable) is a ConfigError naming the knob,
so a reload that introduces it changes nothing.
"""

from __future__ import annotations

import enum
import re
import shlex
from dataclasses import dataclass

from execd.config.settings import Settings
from execd.errors import ConfigError

__all__ = ["CronJobSpec", "CronMode", "CronSettings", "cron_settings", "parse_period"]


class CronMode(enum.Enum):
    PERIODIC = "Periodic"  # run every PERIOD; killed if still running at the next period
    WAIT_FOR_EXIT = "WaitForExit"  # run again PERIOD after each exit; may run forever
    ONE_SHOT = "OneShot"  # run once at start (again on reconfig with RECONFIG_RERUN)
    ON_DEMAND = "OnDemand"  # run only when asked (CronManager.run_now)


_PERIOD_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$", re.I)
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DEFAULT_JOB_LOAD = 0.01  # HTCondor's default STARTD_CRON_<name>_JOB_LOAD


def parse_period(text: str) -> float:
    """Seconds in a period such as ``30``, ``30s``, ``5m`` or ``1h``."""
    match = _PERIOD_RE.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a period (a number with an optional s, m or h)")
    return float(match.group(1)) * _UNIT[match.group(2).lower()]


def parse_env(text: str) -> dict[str, str]:
    """HTCondor's environment syntax: ``"A=1 B='x y'"`` (new) or ``A=1;B=2`` (old)."""
    stripped = text.strip()
    if stripped.startswith('"') and stripped.endswith('"') and len(stripped) >= 2:
        words = shlex.split(stripped[1:-1])
    else:
        words = [w for w in stripped.split(";") if w.strip()]
    env: dict[str, str] = {}
    for word in words:
        name, sep, value = word.strip().partition("=")
        if not sep or not name:
            raise ValueError(f"{word!r} is not NAME=value")
        env[name] = value
    return env


@dataclass(frozen=True)
class CronJobSpec:
    name: str
    executable: str
    mode: CronMode = CronMode.PERIODIC
    period: float = 0.0
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    prefix: str = ""
    kill: bool = False
    reconfig: bool = False
    reconfig_rerun: bool = False
    job_load: float = _DEFAULT_JOB_LOAD
    condition: str | None = None  # ClassAd expression text, evaluated on the machine
    slots: tuple[int, ...] = ()  # only these SlotIds receive the output (empty: all)
    metrics: tuple[tuple[str, str], ...] = ()  # (SUM|PEAK, resource)


@dataclass(frozen=True)
class CronSettings:
    jobs: tuple[CronJobSpec, ...] = ()
    max_job_load: float = 0.1
    autopublish: str = "never"  # never, always or if_changed
    log_non_zero_exit: bool = False


def _knob(job: str, what: str) -> str:
    return f"STARTD_CRON_{job}_{what}"


def _job_spec(settings: Settings, job: str) -> CronJobSpec:
    def text(what: str) -> str | None:
        return settings.get_str(_knob(job, what))

    def fail(what: str, message: str) -> ConfigError:
        return settings._error(_knob(job, what), message)

    executable = text("EXECUTABLE")
    if executable is None:
        raise fail("EXECUTABLE", f"cron job {job} is in STARTD_CRON_JOBLIST but has no executable")
    mode_text = text("MODE") or "Periodic"
    modes = {m.value.lower(): m for m in CronMode}
    mode = modes.get(mode_text.lower())
    if mode is None:
        known = ", ".join(m.value for m in CronMode)
        raise fail("MODE", f"unknown mode {mode_text!r}; use {known}")
    period = 0.0
    period_text = text("PERIOD")
    if period_text is not None:
        try:
            period = parse_period(period_text)
        except ValueError as exc:
            raise fail("PERIOD", str(exc)) from None
    elif mode is CronMode.PERIODIC:
        raise fail("PERIOD", f"cron job {job} is Periodic but has no period")
    if mode is CronMode.PERIODIC and period <= 0:
        raise fail("PERIOD", f"cron job {job} is Periodic but its period is {period_text}")
    try:
        env = parse_env(text("ENV") or "")
    except ValueError as exc:
        raise fail("ENV", str(exc)) from None
    try:
        args = tuple(shlex.split(text("ARGS") or ""))
    except ValueError as exc:
        raise fail("ARGS", str(exc)) from None
    metrics: list[tuple[str, str]] = []
    for item in re.split(r"[\s,]+", text("METRICS") or ""):
        if not item:
            continue
        kind, sep, resource = item.partition(":")
        if not sep or kind.upper() not in ("SUM", "PEAK") or not resource:
            raise fail("METRICS", f"{item!r} is not SUM:<resource> or PEAK:<resource>")
        metrics.append((kind.upper(), resource))
    slot_ids: list[int] = []
    for word in settings.get_list(_knob(job, "SLOTS")):
        if not word.isdigit():
            raise fail("SLOTS", f"{word!r} is not a slot number")
        slot_ids.append(int(word))
    condition = text("CONDITION")
    if condition is not None:
        settings.get_expr(_knob(job, "CONDITION"))  # a bad expression is a ConfigError
    load = settings.get_float(_knob(job, "JOB_LOAD"))
    return CronJobSpec(
        name=job,
        executable=executable,
        mode=mode,
        period=period,
        args=args,
        env=tuple(env.items()),
        cwd=text("CWD"),
        prefix=text("PREFIX") or "",
        kill=settings.get_bool(_knob(job, "KILL")),
        reconfig=settings.get_bool(_knob(job, "RECONFIG")),
        reconfig_rerun=settings.get_bool(_knob(job, "RECONFIG_RERUN")),
        job_load=_DEFAULT_JOB_LOAD if load is None else load,
        condition=condition,
        slots=tuple(slot_ids),
        metrics=tuple(metrics),
    )


def cron_settings(settings: Settings) -> CronSettings:
    """The startd cron jobs and limits SETTINGS define (ConfigError on a bad value)."""
    names = list(dict.fromkeys(settings.get_list("STARTD_CRON_JOBLIST")))
    autopublish = (settings.get_str("STARTD_CRON_AUTOPUBLISH") or "never").lower()
    if autopublish not in ("never", "always", "if_changed"):
        raise settings._error(
            "STARTD_CRON_AUTOPUBLISH", f"{autopublish!r} is not Never, Always or If_Changed"
        )
    max_load = settings.get_float("STARTD_CRON_MAX_JOB_LOAD")
    return CronSettings(
        jobs=tuple(_job_spec(settings, name) for name in names),
        max_job_load=0.1 if max_load is None else max_load,
        autopublish=autopublish,
        log_non_zero_exit=settings.get_bool("STARTD_CRON_LOG_NON_ZERO_EXIT"),
    )
