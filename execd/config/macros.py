"""Macro expansion in HTCondor config values.

``$(NAME)``, ``$(NAME:default)``, ``$(DOLLAR)`` and HTCondor's special functions
(``$ENV()``, ``$INT()``, ``$SUBSTR()``, ``$Fn()``, ...: execd/config/macro_funcs.py).
Expansion is lazy (at lookup), recursive, and bounded: a reference cycle
is a ConfigError naming the cycle, and runaway nesting or growth is a ConfigError too,
never a hang. ``$$(...)`` is left alone (HTCondor keeps it for match-time substitution).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from execd.config import macro_funcs
from execd.errors import ConfigError

MAX_DEPTH = 64  # nested references deeper than this are an error, not a stack overflow
MAX_LENGTH = 1 << 20  # an expansion longer than 1 MiB is runaway growth
MAX_STEPS = 100_000  # references expanded for one lookup

Resolver = Callable[[str], str | None]  # NAME -> raw value in the caller's context


@dataclass
class _Budget:
    steps: int = 0
    origin: str = ""
    chain: list[str] = field(default_factory=list)

    def spend(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise ConfigError(
                f"macro expansion of {self.origin} does not end (over {MAX_STEPS} references)"
            )


def find_close(text: str, start: int) -> int:
    """Index of the ')' matching the '(' just before ``start``, or -1."""
    depth = 1
    i = start
    while i < len(text):
        c = text[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_default(body: str) -> tuple[str, str | None]:
    """NAME:default -> (NAME, default); the colon splits at the first one at depth 0."""
    depth = 0
    for i, c in enumerate(body):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == ":" and depth == 0:
            return body[:i], body[i + 1 :]
    return body, None


class Expander:
    """Expands macros against a resolver (the config table in one lookup context)."""

    def __init__(
        self, resolve: Resolver, env: Mapping[str, str], rng: random.Random | None = None
    ) -> None:
        self.resolve = resolve
        self.env = env
        # $RANDOM_* spread load across nodes; they are not secrets. Seeding a Random
        # reads 2.5 KB from the kernel: done when a $RANDOM_ macro needs it, not per lookup.
        self._rng = rng

    @property
    def rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random()  # noqa: S311
        return self._rng

    def expand(self, text: str, origin: str = "value") -> str:
        budget = _Budget(origin=origin)
        return self._expand(text, budget)

    def expand_name(self, name: str) -> str | None:
        """The expanded value of NAME, or None when undefined."""
        raw = self.resolve(name)
        if raw is None:
            return None
        budget = _Budget(origin=name, chain=[name.upper()])
        return self._expand(raw, budget)

    def _expand(self, text: str, budget: _Budget) -> str:
        if "$" not in text:
            return text
        out: list[str] = []
        size = 0
        i = 0
        while i < len(text):
            j = text.find("$", i)
            if j < 0:
                out.append(text[i:])
                break
            piece, next_i = self._one(text, j, budget)
            out += (text[i:j], piece)
            size += (j - i) + len(piece)
            if size > MAX_LENGTH:
                raise ConfigError(
                    f"macro expansion of {budget.origin} grows past {MAX_LENGTH} bytes"
                )
            i = next_i
        return "".join(out)

    def _one(self, text: str, j: int, budget: _Budget) -> tuple[str, int]:
        """Expand the reference starting at text[j] == '$'; return (result, next index)."""
        if text.startswith("$$(", j):
            close = find_close(text, j + 3)
            if close < 0:
                return text[j:], len(text)
            return text[j : close + 1], close + 1
        if text.startswith("$(", j):
            close = find_close(text, j + 2)
            if close < 0:
                raise ConfigError(f"unterminated $( in {budget.origin}: {text[j:j + 40]!r}")
            return self._reference(text[j + 2 : close], budget), close + 1
        func = macro_funcs.special(text, j)
        if func is not None:
            start = j + len(func) + 2
            close = find_close(text, start)
            if close < 0:
                raise ConfigError(f"unterminated ${func}( in {budget.origin}")
            return self._function(func, text[start:close], budget), close + 1
        return "$", j + 1

    def _reference(self, body: str, budget: _Budget) -> str:
        budget.spend()
        name, default = _split_default(body)
        if "$" in name:
            name = self._expand(name, budget)
        name = name.strip()
        if name.upper() == "DOLLAR":
            return "$"
        raw = self.resolve(name) if name else None
        if raw is None or (raw == "" and default is not None):
            return self._expand(default, budget) if default is not None else ""
        return self._expand_named(name, raw, budget)

    def _value(self, name: str, budget: _Budget) -> str | None:
        """NAME's expanded value, None when it is not defined."""
        raw = self.resolve(name) if name else None
        return None if raw is None else self._expand_named(name, raw, budget)

    def _expand_named(self, name: str, raw: str, budget: _Budget) -> str:
        key = name.upper()
        if key in budget.chain:
            cycle = [*budget.chain[budget.chain.index(key) :], key]
            raise ConfigError("macro cycle: " + " -> ".join(cycle))
        if len(budget.chain) >= MAX_DEPTH:
            raise ConfigError(
                f"macro references nested deeper than {MAX_DEPTH} levels expanding {budget.origin}"
            )
        budget.chain.append(key)
        try:
            return self._expand(raw, budget)
        finally:
            budget.chain.pop()

    def _function(self, func: str, body: str, budget: _Budget) -> str:
        budget.spend()
        def raw(name: str) -> str | None:  # as HTCondor, " NAME" names nothing
            return self.resolve(name) if name and name == name.strip() else None

        ctx = macro_funcs.Call(
            raw=raw,
            value=lambda name: self._value(name, budget) if raw(name) is not None else None,
            expand=lambda text: self._expand(text, budget),
            env=self.env,
            rng=lambda: self.rng,
        )
        return macro_funcs.call(func, body, ctx)
