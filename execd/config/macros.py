"""Macro expansion in HTCondor config values.

``$(NAME)``, ``$(NAME:default)``, ``$ENV(VAR)``, ``$ENV(VAR:default)``, ``$INT(NAME)``,
``$REAL(NAME)``, ``$RANDOM_INTEGER(lo,hi[,step])``, ``$RANDOM_CHOICE(a,b,...)`` and
``$(DOLLAR)``. Expansion is lazy (at lookup), recursive, and bounded: a reference cycle
is a ConfigError naming the cycle, and runaway nesting or growth is a ConfigError too,
never a hang. ``$$(...)`` is left alone (HTCondor keeps it for match-time substitution).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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


_FUNCS = ("ENV", "INT", "REAL", "RANDOM_INTEGER", "RANDOM_CHOICE")


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
        for func in _FUNCS:
            if text.startswith(f"${func}(", j):
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
        key = name.upper()
        if key in budget.chain:
            cycle = [*budget.chain[budget.chain.index(key) :], key]
            raise ConfigError("macro cycle: " + " -> ".join(cycle))
        if len(budget.chain) >= MAX_DEPTH:
            raise ConfigError(
                f"macro references nested deeper than {MAX_DEPTH} levels expanding {budget.origin}"
            )
        raw = self.resolve(name) if name else None
        if raw is None or (raw == "" and default is not None):
            return self._expand(default, budget) if default is not None else ""
        budget.chain.append(key)
        try:
            return self._expand(raw, budget)
        finally:
            budget.chain.pop()

    def _function(self, func: str, body: str, budget: _Budget) -> str:
        budget.spend()
        if func == "ENV":
            var, default = _split_default(body)
            value = self.env.get(var.strip())
            if value is None:
                return self._expand(default, budget) if default is not None else ""
            return value
        if func in ("INT", "REAL"):
            name, default = _split_default(body.split(",", maxsplit=1)[0])
            value = self._reference(name if default is None else f"{name}:{default}", budget)
            return _numeric(func, name.strip(), value)
        args = [self._expand(a.strip(), budget) for a in body.split(",")]
        if func == "RANDOM_CHOICE":
            return self.rng.choice(args)
        try:
            nums = [int(a) for a in args]
        except ValueError:
            raise ConfigError(f"$RANDOM_INTEGER({body}) needs integer arguments") from None
        if len(nums) not in (2, 3) or nums[1] < nums[0]:
            raise ConfigError(f"$RANDOM_INTEGER({body}) needs low, high[, step] with low <= high")
        step = nums[2] if len(nums) == 3 and nums[2] > 0 else 1
        return str(self.rng.randrange(nums[0], nums[1] + 1, step))


def _numeric(func: str, name: str, value: str) -> str:
    # classad2 is loaded only when a config uses $INT/$REAL: the starter imports config.
    from execd.classads import evaluate, to_number  # noqa: PLC0415

    number = to_number(evaluate(value)) if value.strip() else None
    if number is None:
        raise ConfigError(f"${func}({name}): {value!r} is not a number")
    if func == "INT":
        return str(int(number))
    return repr(float(number))
