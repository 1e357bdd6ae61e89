"""HTCondor's special config macro functions: ``$NAME(body)`` forms other than ``$(NAME)``.

``$ENV(VAR[:default])``, ``$RANDOM_CHOICE(a,b,...|LIST)``, ``$RANDOM_INTEGER(lo,hi[,step])``,
``$CHOICE(index,LIST|a,b,...)``, ``$SUBSTR(NAME,start[,length])``, ``$INT(NAME|expr[,fmt])``,
``$REAL(NAME|expr[,fmt])``, ``$STRING(NAME|text[,fmt])``, ``$EVAL(NAME|expr)``,
``$BASENAME(NAME[,suffix])``, ``$DIRNAME(NAME)`` and the file name parts
``$F[pdnxqabfwu](NAME)``. Each means what it means in HTCondor 25.x's config reader
(src/condor_utils/config.cpp, ``evaluate_macro_func``), which is the reference of
tests/unit/config/test_macro_functions.py. Where HTCondor would stop a daemon
(``might_EXCEPT``: a bad index, format or number) execd raises a ConfigError naming the
macro, so a reload that meets one keeps the running config.

One deliberate difference: a body ends at its balancing ``)``; HTCondor ends it at the
first ``)``, which breaks ``$EVAL(strcat("a","b"))`` and ``$INT($(X)*2)``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from execd.errors import ConfigError

NAMES = frozenset({"ENV", "RANDOM_CHOICE", "RANDOM_INTEGER", "CHOICE", "SUBSTR", "INT", "REAL",
                   "STRING", "EVAL", "BASENAME", "DIRNAME"})  # fmt: skip
# $F followed by any of HTCondor's file name flags, in either case ($F alone too)
_FILENAME = re.compile(r"F[pnxdqabfwuPNXDQABFWU]*")
_CALL = re.compile(r"\$([A-Za-z_]+)\(")
# one printf conversion: flags, width, precision, C length modifiers (Python has none)
_CONVERSION = re.compile(r"%([-+ #0]*(\d*)(?:\.(\d*))?)(?:hh|h|ll|l|j|z|t|L|q)?([a-zA-Z%])")
MAX_FORMAT_WIDTH = 4096  # a wider field or precision is a mistake, not a value
_KINDS = {"INT": "diouxXc", "REAL": "eEfFgG", "STRING": "s"}
_WHAT = {"INT": "integer", "REAL": "real", "STRING": "string"}
_DECIMAL = re.compile(r"\s*[-+]?\d+\s*")


def special(text: str, j: int) -> str | None:
    """The function name when ``text[j:]`` starts ``$NAME(`` for a special macro, else None."""
    found = _CALL.match(text, j)
    if found is None:
        return None
    name = found.group(1)
    return name if name in NAMES or _FILENAME.fullmatch(name) else None


@dataclass
class Call:
    """What a function needs from the expander: ``raw(NAME)`` is NAME's value as written,
    ``value(NAME)`` the same expanded (both None when NAME is not defined), and
    ``expand(text)`` expands macros in text."""

    raw: Callable[[str], str | None]
    value: Callable[[str], str | None]
    expand: Callable[[str], str]
    env: Mapping[str, str]
    rng: Callable[[], random.Random]

    def named_or_literal(self, arg: str) -> str:
        """HTCondor's reading of most arguments: a macro's value if ARG names one, else
        ARG itself, with macros expanded."""
        found = self.value(arg)
        return found if found is not None else self.expand(arg)


def call(func: str, body: str, ctx: Call) -> str:
    """The expansion of ``$func(body)``; any problem is a ConfigError naming the macro."""
    try:
        return _call(func, body, ctx)
    except (ArithmeticError, ValueError, TypeError, MemoryError) as exc:  # never past here
        raise ConfigError(f"${func}({body}): {type(exc).__name__}: {exc}") from None


def _call(func: str, body: str, ctx: Call) -> str:
    if func == "ENV":
        var, colon, default = body.partition(":")
        found = ctx.env.get(var.strip())
        if found is not None:
            return found
        return ctx.expand(default) if colon else "UNDEFINED"
    if func == "RANDOM_CHOICE":
        return _random_choice(body, ctx)
    if func == "RANDOM_INTEGER":
        return _random_integer(body, ctx)
    if func == "CHOICE":
        return _choice(body, ctx)
    if func == "SUBSTR":
        return _substr(body, ctx)
    if func in ("INT", "REAL"):
        return _number(func, body, ctx)
    if func == "STRING":
        return _string(body, ctx)
    if func == "EVAL":
        return _eval(body, ctx)
    return _filename(func, body, ctx)


def _items(text: str, sep: str = ",") -> list[str]:
    return [item.strip() for item in text.split(sep)] if text.strip() else []


def _random_choice(body: str, ctx: Call) -> str:
    entries = [ctx.expand(e) for e in _items(body)]
    if len(entries) == 1:  # one entry naming a macro: choose from that macro's list
        listed = ctx.value(entries[0])
        if listed is not None:
            entries = [e for e in re.split(r"[,\s]+", listed) if e]
    if not entries:
        raise ConfigError(f"$RANDOM_CHOICE({body}): nothing to choose from")
    return ctx.rng().choice(entries)


def _random_integer(body: str, ctx: Call) -> str:
    args = [ctx.expand(a) for a in _items(body)]
    try:
        nums = [int(a) for a in args]
    except ValueError:
        raise ConfigError(f"$RANDOM_INTEGER({body}) needs integer arguments") from None
    if len(nums) not in (2, 3) or nums[1] < nums[0]:
        raise ConfigError(f"$RANDOM_INTEGER({body}) needs low, high[, step] with low <= high")
    step = nums[2] if len(nums) == 3 and nums[2] > 0 else 1
    return str(ctx.rng().randrange(nums[0], nums[1] + 1, step))


def _index(func: str, body: str, arg: str, ctx: Call) -> int:
    text = ctx.named_or_literal(arg)
    value = _integer(text)
    if value is None:
        raise ConfigError(f"${func}({body}): {text.strip()!r} is not an integer")
    return value


def _choice(body: str, ctx: Call) -> str:
    first, _, rest = body.partition(",")
    index = _index("CHOICE", body, first, ctx)
    if index < 0:
        raise ConfigError(f"$CHOICE({body}): index {index} is negative")
    if not rest.strip():
        raise ConfigError(f"$CHOICE({body}): no list to choose from")
    if "," in rest:
        items = _items(ctx.expand(rest))
    else:  # the name of a macro holding the list
        listed = ctx.value(rest.strip())
        if listed is None:
            raise ConfigError(f"$CHOICE({body}): no list named {rest.strip()!r}")
        items = _items(listed)
    if index >= len(items):
        raise ConfigError(f"$CHOICE({body}): index {index} is past the list's {len(items)} items")
    return items[index]


def _substr(body: str, ctx: Call) -> str:
    name, comma, args = body.partition(",")
    if not comma:
        raise ConfigError(f"$SUBSTR({body}): no start position")
    start_arg, comma, length_arg = args.partition(",")
    start = _index("SUBSTR", body, start_arg, ctx)
    length = _index("SUBSTR", body, length_arg, ctx) if comma else None
    text = ctx.value(name) or ""
    begin = min(max(start if start >= 0 else len(text) + start, 0), len(text))
    left = len(text) - begin
    if length is None:
        length = left
    elif length < 0:
        length = max(left + length, 0)
    return text[begin : begin + min(length, left)]


def _formatted(func: str, body: str, fmt: str | None, value: object) -> str | None:
    """VALUE through a printf format with one conversion of FUNC's kind; None without one."""
    if fmt is None:
        return None
    conversions = [m for m in _CONVERSION.finditer(fmt) if m.group(4) != "%"]
    if len(conversions) == 1 and conversions[0].group(4) in _KINDS[func]:
        sizes = [int(n) for n in conversions[0].group(2, 3) if n]
        if any(n > MAX_FORMAT_WIDTH for n in sizes):
            raise ConfigError(f"${func}({body}): {fmt!r} asks for a field wider than "
                              f"{MAX_FORMAT_WIDTH} characters")  # fmt: skip
        try:  # as a Python %-format: C's length modifiers dropped
            return _CONVERSION.sub(lambda m: f"%{m.group(1)}{m.group(4)}", fmt) % (value,)
        except (ValueError, TypeError, OverflowError):
            pass
    raise ConfigError(f"${func}({body}): {fmt!r} is not a printf format for one {_WHAT[func]}")


def _evaluated(text: str) -> Any:
    """TEXT's value as a ClassAd expression in an empty ad; None when it does not parse."""
    # classad2 is loaded only when a config uses these functions: the starter imports config.
    from execd.classads import ClassAdError, evaluate, parse_expr  # noqa: PLC0415

    try:
        return evaluate(parse_expr(text))
    except ClassAdError:
        return None


def _plain_number(value: Any) -> int | float | None:
    """An int, float or bool result as a number; undefined and error (an IntEnum in
    classad2, so an int to isinstance) and anything else are None."""
    from execd.classads import is_error, is_undefined  # noqa: PLC0415

    if is_undefined(value) or is_error(value) or not isinstance(value, bool | int | float):
        return None
    return value


def _integer(text: str) -> int | None:
    """HTCondor's string_is_long_param: a decimal literal, else a ClassAd expression whose
    value is an integer, a real (truncated) or a boolean."""
    if _DECIMAL.fullmatch(text):
        return int(text)
    value = _plain_number(_evaluated(text)) if text.strip() else None
    return None if value is None or not math.isfinite(value) else int(value)


def _real(text: str) -> float | None:
    if "_" not in text:  # Python's float() takes 1_000, C's strtod does not
        try:
            return float(text)
        except ValueError:
            pass
    value = _plain_number(_evaluated(text)) if text.strip() else None
    return None if value is None else float(value)


def _number(func: str, body: str, ctx: Call) -> str:
    name, comma, fmt = body.partition(",")
    text = ctx.named_or_literal(name)
    if func == "INT":
        whole = _integer(text)
        if whole is None:
            raise ConfigError(f"$INT({body}): {text.strip()!r} is not an integer")
        out = _formatted(func, body, fmt if comma else None, whole)
        return str(whole) if out is None else out
    real = _real(text)
    if real is None:
        raise ConfigError(f"$REAL({body}): {text.strip()!r} is not a number")
    out = _formatted(func, body, fmt if comma else None, real)
    if out is None:
        return f"{real:.16G}"
    return out if "." in out else out + ".0"  # HTCondor makes it look like a real


def _string(body: str, ctx: Call) -> str:
    name, comma, fmt = body.partition(",")
    text = ctx.named_or_literal(name)
    value = _evaluated(text) if text.strip() else None
    if isinstance(value, str):
        text = value
    out = _formatted("STRING", body, fmt if comma else None, text)
    return text if out is None else out


def _eval(body: str, ctx: Call) -> str:
    """The value of an expression, unparsed as HTCondor does (reals as 3.500000000000000E+00);
    an expression that does not parse gives its macro-expanded text, or nothing."""
    raw = ctx.raw(body)
    text = ctx.named_or_literal(body)
    value = _evaluated(text) if text.strip() else None
    if value is None:
        return text if "$" in (body if raw is None else raw) else ""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:.15E}"
    from execd.classads import new_ad  # noqa: PLC0415

    return str(new_ad({"V": value}).printOld()).removeprefix("V = ").rstrip("\n")


def _filename(func: str, body: str, ctx: Call) -> str:
    suffix = None
    name = body
    if func == "BASENAME" and "," in body:
        name, _, suffix = body.rpartition(",")
        suffix = suffix.lstrip()
    if func == "BASENAME":
        flags = "nx"
    elif func == "DIRNAME":
        flags = "p"
    else:
        flags = func[1:].lower()
    text = ctx.named_or_literal(name)
    return file_part(text, flags, suffix)


def file_part(path: str, flags: str, suffix: str | None = None) -> str:
    """The parts of a file name that HTCondor's ``$F<flags>()`` keeps: p the directory, d
    one parent directory per d, n the name without extension, x the extension; b drops the
    trailing / of directories and the . of the extension; q quotes ("), with a ('); w and
    u turn path separators to \\ or /. f (a full path) changes nothing here: HTCondor's
    config has no working directory to prefix."""
    if len(path) > 1 and path[0] == path[-1] and path[0] in "\"'":
        path = path[1:-1]
    if "w" in flags:
        path = path.replace("/", "\\")
    elif "u" in flags:
        path = path.replace("\\", "/")
    bare = "b" in flags
    parts = ("x" in flags) | ("n" in flags) << 1 | ("p" in flags) << 2 | ("d" in flags) << 3
    name_at = path.rfind("/") + 1
    dot = path.rfind(".", name_at + 1)
    ext_at = dot if dot > name_at else len(path)
    end = len(path)
    if suffix and end - len(suffix) >= name_at and path.lower().endswith(suffix.lower()):
        ext_at, parts = end - len(suffix), parts & ~1
    if not name_at and parts & 3:
        parts &= ~12
    start = 0
    if parts == 1:
        start = ext_at + 1 if bare and ext_at < end else ext_at
    elif parts == 3:
        start = name_at
    elif parts == 2:
        start, end = name_at, ext_at
    elif parts == 4:
        end = name_at - 1 if bare and name_at > 0 else name_at
    elif parts == 6:
        end = ext_at
    elif parts >= 8:
        if not name_at:
            start = end = 0
        else:
            start = _dirs_start(path, flags.count("d"))
            if parts & 3 == 2:
                end = ext_at
            elif parts & 3 == 0:
                end = name_at - 1 if bare else name_at
    picked = path[start:end]
    if "q" in flags:
        quote = "'" if "a" in flags else '"'
        return quote + picked + quote
    return picked


def _dirs_start(path: str, dirs: int) -> int:
    """Where the file name plus its last DIRS directories begin (either separator)."""
    seps = [i + 1 for i, c in enumerate(path) if c in "/\\"]
    del seps[max(len(seps) - dirs, 0) :]
    return seps[-1] if seps else 0
