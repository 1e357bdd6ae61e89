"""PolicyConfig: the parsed policy expressions and numbers the engine evaluates.

Built from plain expression text with :meth:`PolicyConfig.from_strings`; the settings
registry feeds it later. Defaults are HTCondor 25's (IS_OWNER False, START True,
WANT_VACATE True, MachineMaxVacateTime 600, KILLING_TIMEOUT 30, MATCH_TIMEOUT 120,
CLAIM_WORKLIFE 1200, POLLING_INTERVAL 5, UPDATE_INTERVAL 300).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from execd import classads
from execd.errors import ConfigError

EXPRESSION_DEFAULTS: dict[str, str] = {
    "START": "True",
    "IS_OWNER": "False",
    "RANK": "0.0",
    "SUSPEND": "False",
    "CONTINUE": "True",
    "PREEMPT": "False",
    "KILL": "False",
    "WANT_SUSPEND": "False",
    "WANT_VACATE": "True",
    "MAXJOBRETIREMENTTIME": "0",
    "MachineMaxVacateTime": "600",
    "CLAIM_WORKLIFE": "1200",
    "RUNBENCHMARKS": "LastBenchmark == 0",
    "START_BACKFILL": "False",
    "EVICT_BACKFILL": "False",
    "WANT_HOLD": "False",
    "WANT_HOLD_REASON": "UNDEFINED",
    "WANT_HOLD_SUBCODE": "UNDEFINED",
    # CpuBusy/CpuBusyTime in the ad follow it (seed 000 3.5.3); desktop policies set it
    "CPUBusy": "False",
    # what the negotiator charges a claim of the slot (published, not evaluated here)
    "SLOT_WEIGHT": "Cpus",
}
# Expressions with a _VANILLA variant used for vanilla-universe jobs when configured.
VANILLA_VARIANTS = ("SUSPEND", "CONTINUE", "PREEMPT", "KILL", "WANT_SUSPEND", "WANT_VACATE")
NUMBER_DEFAULTS: dict[str, float] = {
    "KILLING_TIMEOUT": 30.0,
    "MATCH_TIMEOUT": 120.0,
    "POLLING_INTERVAL": 5.0,
    "UPDATE_INTERVAL": 300.0,
    "MAX_CLAIM_ALIVES_MISSED": 6.0,
    "ALIVE_INTERVAL": 300.0,
}


@dataclass(frozen=True)
class PolicyConfig:
    expressions: dict[str, Any] = field(default_factory=dict)  # name -> classad2 ExprTree
    texts: dict[str, str] = field(default_factory=dict)  # name -> source text
    numbers: dict[str, float] = field(default_factory=dict)
    backfill_enabled: bool = False
    # expressions that are a literal true/false: the engine need not evaluate them
    constants: dict[str, bool] = field(default_factory=dict)
    has_vanilla: bool = False  # any *_VANILLA variant configured

    @classmethod
    def from_strings(
        cls,
        expressions: dict[str, str] | None = None,
        numbers: dict[str, float] | None = None,
        backfill_enabled: bool = False,
    ) -> PolicyConfig:
        """Parse ``expressions`` (name -> text) over the defaults; bad text is a ConfigError."""
        texts = dict(EXPRESSION_DEFAULTS)
        for name, text in (expressions or {}).items():
            base = name.removesuffix("_VANILLA")
            if base not in EXPRESSION_DEFAULTS:
                raise ConfigError(f"unknown policy expression {name}")
            texts[name] = text
        parsed: dict[str, Any] = {}
        for name, text in texts.items():
            try:
                parsed[name] = classads.parse_expr(text)
            except classads.ClassAdError as exc:
                raise ConfigError(f"{name}: {exc}") from None
        nums = dict(NUMBER_DEFAULTS)
        for name, value in (numbers or {}).items():
            if name not in NUMBER_DEFAULTS:
                raise ConfigError(f"unknown policy setting {name}")
            nums[name] = float(value)
        constants = {name: text.strip().lower() == "true" for name, text in texts.items()
                     if text.strip().lower() in ("true", "false")}
        has_vanilla = any(name.endswith("_VANILLA") for name in texts)
        return cls(parsed, texts, nums, backfill_enabled, constants, has_vanilla)

    def expr(self, name: str, vanilla: bool = False) -> Any:
        if vanilla and name in VANILLA_VARIANTS:
            found = self.expressions.get(name + "_VANILLA")
            if found is not None:
                return found
        return self.expressions[name]

    def text(self, name: str, vanilla: bool = False) -> str:
        if vanilla and name + "_VANILLA" in self.texts:
            return self.texts[name + "_VANILLA"]
        return self.texts[name]

    def number(self, name: str) -> float:
        return self.numbers[name]

    def constant(self, name: str) -> bool | None:
        """True/False when the expression is that literal (no need to evaluate it)."""
        return self.constants.get(name)


def field_names() -> list[str]:
    return [f.name for f in fields(PolicyConfig)]
