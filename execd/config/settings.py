"""Typed, validated settings over a loaded Config.

`load_settings(config)` checks every declared knob the config defines (integers,
booleans, ClassAd expressions, ...) and raises one ConfigError listing every problem,
each with the knob's file and line. After that, typed getters return values with
HTCondor's defaults applied; per-slot lookups (SLOT<N>_START) go through the same
getters with ``slot=``/``slot_type=``.
"""

from __future__ import annotations

import re
from typing import Any

from execd.classads import ClassAdError, evaluate, parse_expr, to_number
from execd.config.knobs import Kind, find_knob
from execd.config.loader import Config
from execd.errors import ConfigError

_TRUE = {"true", "t", "yes", "y", "1", "on"}
_FALSE = {"false", "f", "no", "n", "0", "off"}


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    value = evaluate(text)
    if isinstance(value, bool):
        return value
    raise ValueError(f"{text!r} is not true or false")


def parse_number(text: str, *, integer: bool) -> float:
    stripped = text.strip()
    try:
        number = float(int(stripped)) if integer else float(stripped)
    except ValueError:
        number_or_none = to_number(evaluate(stripped))
        if number_or_none is None:
            kind = "an integer" if integer else "a number"
            raise ValueError(f"{stripped!r} is not {kind}") from None
        number = number_or_none
    return float(int(number)) if integer else number


def parse_list(text: str) -> list[str]:
    return [p for p in re.split(r"[\s,]+", text.strip()) if p]


def check_value(kind: Kind, text: str) -> None:
    """Raise ValueError (or ClassAdError) if TEXT is not a valid value of KIND."""
    if not text.strip():
        return  # empty means "use the default", as in HTCondor
    if kind is Kind.INT:
        parse_number(text, integer=True)
    elif kind is Kind.FLOAT:
        parse_number(text, integer=False)
    elif kind is Kind.BOOL:
        parse_bool(text)
    elif kind is Kind.EXPR:
        parse_expr(text)


class Settings:
    """Validated, typed access to a Config."""

    def __init__(self, config: Config) -> None:
        self.config = config

    # -- raw ----------------------------------------------------------------------
    def text(self, name: str, *, slot: int | None = None, slot_type: int | None = None,
             subsystem: str | None = "STARTD") -> str | None:
        """The expanded value, or the knob's default; None when neither exists or empty."""
        value = self.config.get(name, subsystem=subsystem, slot=slot, slot_type=slot_type)
        if value is None or not value.strip():
            return None
        return value.strip()

    def _or_default(self, name: str, **ctx: Any) -> str | None:
        value = self.text(name, **ctx)
        if value is not None:
            return value
        default = self.config.default(name)
        if not default:
            return None
        return self.config.expand(default).strip() or None

    # -- typed getters --------------------------------------------------------------
    def get_int(self, name: str, **ctx: Any) -> int | None:
        value = self._or_default(name, **ctx)
        return None if value is None else int(self._checked(name, value, Kind.INT))

    def get_float(self, name: str, **ctx: Any) -> float | None:
        value = self._or_default(name, **ctx)
        return None if value is None else self._checked(name, value, Kind.FLOAT)

    def get_bool(self, name: str, default: bool = False, **ctx: Any) -> bool:
        value = self._or_default(name, **ctx)
        if value is None:
            return default
        try:
            return parse_bool(value)
        except ValueError as exc:
            raise self._error(name, str(exc), **ctx) from None

    def get_str(self, name: str, **ctx: Any) -> str | None:
        return self._or_default(name, **ctx)

    def get_list(self, name: str, **ctx: Any) -> list[str]:
        return parse_list(self._or_default(name, **ctx) or "")

    def get_expr(self, name: str, **ctx: Any) -> Any:
        """The parsed ClassAd expression (classad2.ExprTree), or None when unset."""
        value = self._or_default(name, **ctx)
        if value is None:
            return None
        try:
            return parse_expr(value)
        except ClassAdError as exc:
            raise self._error(name, str(exc), **ctx) from None

    def _checked(self, name: str, value: str, kind: Kind) -> float:
        try:
            return parse_number(value, integer=kind is Kind.INT)
        except ValueError as exc:
            raise self._error(name, str(exc)) from None

    def _error(self, name: str, message: str, **ctx: Any) -> ConfigError:
        found = self.config.definition(name, **ctx)
        if found is None:
            return ConfigError(f"{name}: {message}")
        return ConfigError(f"{found.name}: {message}", found.origin.file, found.origin.line)

    # -- validation -----------------------------------------------------------------
    def problems(self) -> list[ConfigError]:
        """Every declared knob the files define whose value is not of its type."""
        found: list[ConfigError] = []
        for definition in self.config.table:
            knob = find_knob(definition.name)
            origin = definition.origin
            try:
                value = self.config.get(definition.name, subsystem=None)
            except ConfigError as exc:
                message = f"{definition.name}: {exc.message}"
                found.append(ConfigError(message, origin.file, origin.line))
                continue
            if knob is None or value is None:
                continue
            try:
                check_value(knob.kind, value)
            except (ValueError, ClassAdError) as exc:
                found.append(
                    ConfigError(
                        f"{definition.name} = {value.strip()[:80]!r}: {exc} "
                        f"(expected {knob.kind.value})",
                        origin.file,
                        origin.line,
                    )
                )
        return found


def load_settings(config: Config) -> Settings:
    """Validate CONFIG against the knob registry; one ConfigError lists every problem."""
    settings = Settings(config)
    problems = settings.problems()
    if len(problems) == 1:
        raise problems[0]
    if problems:
        listing = "\n".join(f"  {p}" for p in problems)
        raise ConfigError(f"{len(problems)} problems in the configuration:\n{listing}")
    return settings
