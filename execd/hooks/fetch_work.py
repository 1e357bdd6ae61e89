"""Fetch-work hooks: keywords, the fetched job ad and FetchWorkDelay (seed 003).

The decisions, without I/O: which keyword a slot fetches with (SLOT<N>_JOB_HOOK_KEYWORD,
then STARTD_JOB_HOOK_KEYWORD), what the hooks get on stdin (the slot ad; the job ad and
the slot ad separated by `-----`), whether a fetched ad is a job execd can run (the
seed's required and optional attributes, with their types), and how long to wait
before the next fetch. The daemon side (execd.daemon.fetch_work) runs the hooks.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import Any

from execd.classads import ClassAdError, evaluate, parse_ad, to_number
from execd.config.settings import Settings

__all__ = [
    "DEFAULT_FETCH_WORK_DELAY", "FetchHooks", "FetchedJobError", "fetch_hooks",
    "fetch_work_delay", "fetched_job", "two_ads",
]

DEFAULT_FETCH_WORK_DELAY = 300.0  # seconds, when FetchWorkDelay is not defined
DEFAULT_TIMEOUT = 120.0
SEPARATOR = "-----\n"
VANILLA, JAVA = 5, 10

# The seed's optional attributes and their ClassAd types.
STRING_ATTRS = ("Iwd", "In", "Out", "Err", "Env", "Args", "JarFiles", "StarterUserLog")
PATH_ATTRS = ("Cmd", "In", "Out", "Err", "StarterUserLog")  # relative: under Iwd
PSLOT_REQUESTS = ("RequestCpus", "RequestMemory", "RequestDisk")


class FetchedJobError(ValueError):
    """A fetched job ad that cannot run; the message names the attribute and why."""


@dataclass(frozen=True)
class FetchHooks:
    keyword: str
    fetch_work: str
    reply_fetch: str | None
    evict_claim: str | None
    timeout: float


def slot_number(slot_name: str) -> int:
    """`slot1` and `slot1_2` -> 1 (a d-slot fetches with its parent's keyword)."""
    digits = slot_name.removeprefix("slot").split("_")[0]
    return int(digits) if digits.isdigit() else 0


def fetch_hooks(settings: Settings, slot_name: str) -> FetchHooks | None:
    """The slot's fetch hooks; None when it has no keyword or the keyword no FETCH_WORK
    (the one hook that must be defined for the others to operate)."""
    keyword = settings.text(f"SLOT{slot_number(slot_name)}_JOB_HOOK_KEYWORD") \
        or settings.text("STARTD_JOB_HOOK_KEYWORD")
    if not keyword:
        return None
    fetch = settings.text(f"{keyword}_HOOK_FETCH_WORK")
    if not fetch:
        return None
    timeout = settings.get_float(f"{keyword}_HOOK_FETCH_WORK_TIMEOUT")
    return FetchHooks(
        keyword=keyword,
        fetch_work=fetch,
        reply_fetch=settings.text(f"{keyword}_HOOK_REPLY_FETCH"),
        evict_claim=settings.text(f"{keyword}_HOOK_EVICT_CLAIM"),
        timeout=timeout if timeout is not None and timeout > 0 else DEFAULT_TIMEOUT,
    )


def fetch_work_delay(expression: str | None, slot_ad: Any, job_ad: Any | None) -> float:
    """FetchWorkDelay in the slot ad's context (and the running job's): seconds since the
    last fetch completed before the next. Undefined or not a number: 300."""
    if not expression:
        return DEFAULT_FETCH_WORK_DELAY
    value = to_number(evaluate(expression, slot_ad, job_ad))
    if value is None or value < 0:
        return DEFAULT_FETCH_WORK_DELAY
    return float(value)


def two_ads(job_text: str, slot_text: str) -> bytes:
    """REPLY_FETCH's and EVICT_CLAIM's stdin: the job ad, `-----`, the slot ad."""
    return (job_text.rstrip("\n") + "\n" + SEPARATOR + slot_text.rstrip("\n") + "\n").encode()


def _value(ad: Any, name: str) -> Any:
    if name not in ad:
        return None
    value = ad.eval(name)
    return value if isinstance(value, bool | int | float | str) else None


def _under_iwd(path: str, iwd: str | None) -> str:
    return path if os.path.isabs(path) or not iwd else os.path.join(iwd, path)


def fetched_job(text: str, *, keyword: str, partitionable: bool,
                as_root: bool | None = None) -> dict[str, Any]:
    """The fetched job ad as the job manager's dict, HookKeyword added; or
    FetchedJobError naming what is missing or of the wrong type."""
    try:
        ad = parse_ad(text)
    except ClassAdError as exc:
        raise FetchedJobError(f"the fetched job ad does not parse: {exc}") from None
    out: dict[str, Any] = {}
    for name in ad:
        value = _value(ad, name)
        if value is not None:
            out[name] = value
    cmd = out.get("Cmd")
    if not isinstance(cmd, str) or not cmd:
        raise FetchedJobError("Cmd is required: a string, the path of the program to run")
    as_root = os.geteuid() == 0 if as_root is None else as_root
    owner = out.get("Owner")
    if as_root:
        if not isinstance(owner, str) or not owner:
            raise FetchedJobError("Owner is required when execd runs as root: a user name")
        try:
            pwd.getpwnam(owner)
        except KeyError:
            raise FetchedJobError(f"Owner {owner!r} is not a user on this machine") from None
    if partitionable:
        for name in PSLOT_REQUESTS:
            if not isinstance(out.get(name), int | float) or isinstance(out.get(name), bool):
                raise FetchedJobError(f"{name} is required on a partitionable slot: a number")
    for name in STRING_ATTRS:
        if name in ad and not isinstance(out.get(name), str):
            raise FetchedJobError(f"{name} must be a string")
    universe = out.get("JobUniverse", VANILLA)
    if universe == JAVA:
        raise FetchedJobError("JobUniverse 10 (java) is not supported by execd; use 5")
    if universe != VANILLA:
        raise FetchedJobError(f"JobUniverse must be 5 (vanilla), not {universe!r}")
    kill_sig = out.get("KillSig")
    if "KillSig" in ad and not isinstance(kill_sig, str | int):
        raise FetchedJobError("KillSig must be a signal name or number")
    if "StarterUserLogUseXML" in ad and not isinstance(out.get("StarterUserLogUseXML"), bool):
        raise FetchedJobError("StarterUserLogUseXML must be a boolean")
    iwd = out.get("Iwd")
    if iwd is not None and not os.path.isabs(iwd):
        raise FetchedJobError(f"Iwd must be a full path, not {iwd!r}")
    for name in PATH_ATTRS:
        if isinstance(out.get(name), str):
            out[name] = _under_iwd(out[name], iwd)
    out["JobUniverse"] = universe
    out["HookKeyword"] = keyword
    return out
