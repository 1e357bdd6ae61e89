"""Settings -> PolicyConfig, and the engine's actions the daemon carries out itself."""

from __future__ import annotations

import time
from typing import Any

from execd import log
from execd.config.settings import Settings
from execd.policy import actions as act
from execd.policy.config import EXPRESSION_DEFAULTS, NUMBER_DEFAULTS, VANILLA_VARIANTS, PolicyConfig
from execd.policy.slot import Now

logger = log.get_logger("policy")


def now() -> Now:
    return Now(time.monotonic(), time.time())


def policy_config(settings: Settings) -> PolicyConfig:
    """The policy expressions and numbers as the config sets them (HTCondor defaults else)."""
    expressions: dict[str, str] = {}
    names = list(EXPRESSION_DEFAULTS) + [f"{n}_VANILLA" for n in VANILLA_VARIANTS]
    for name in names:
        text = settings.text(name)
        if text is not None:
            expressions[name] = text
    numbers: dict[str, float] = {}
    for name in NUMBER_DEFAULTS:
        value = settings.get_float(name)
        if value is not None:
            numbers[name] = value
    backfill = settings.get_bool("ENABLE_BACKFILL")
    return PolicyConfig.from_strings(expressions, numbers, backfill)


def slot_facts(ad: Any) -> dict[str, Any]:
    """The resource facts of a slot ad that policy expressions read as MY.<attr>."""
    facts: dict[str, Any] = {}
    for key in list(ad):
        value = ad.get(key)
        if isinstance(value, bool | int | float | str):
            facts[key] = value
    return facts


def log_action(action: act.LogEvent) -> None:
    fields = dict(action.fields)
    level = fields.pop("level", "info")
    getattr(logger, level if level in ("debug", "info", "warning", "error") else "info")(
        action.event, **fields
    )
