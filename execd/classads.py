"""A thin adapter over classad2, the real HTCondor ClassAd library.

htcondor2 is imported (by execd._htcondor) for its side effects: without it classad2
lacks HTCondor's unscoped MY-then-TARGET attribute lookup and functions such as
stringListMember.

ClassAd logic is three-valued: an expression can be True, False, Undefined or Error.
classad2 returns ``Value.Undefined``/``Value.Error`` as IntEnums that are *truthy*, so
every policy decision goes through :func:`is_true`, which only accepts ``True`` itself.
"""

from __future__ import annotations

import json
from typing import Any

from execd._htcondor import classad2
from execd.errors import ExecdError

ClassAd = classad2.ClassAd
ExprTree = classad2.ExprTree
Value = classad2.Value

__all__ = [
    "ClassAd",
    "ClassAdError",
    "ExprTree",
    "Value",
    "ad_from_json",
    "ad_to_json",
    "evaluate",
    "is_error",
    "is_true",
    "is_undefined",
    "new_ad",
    "parse_ad",
    "parse_expr",
    "quote",
    "to_number",
]


class ClassAdError(ExecdError):
    """An expression or ad could not be parsed."""


def parse_expr(text: str) -> Any:
    """Parse a ClassAd expression; a syntax error raises :class:`ClassAdError`."""
    if not text.strip():
        raise ClassAdError("empty expression")
    try:
        return classad2.ExprTree(text)
    except classad2.ClassAdException as exc:
        raise ClassAdError(f"cannot parse ClassAd expression {text!r}: {exc}") from None


def parse_ad(text: str) -> Any:
    """Parse a ClassAd in either new (``[a = 1]``) or old (``a = 1`` lines) syntax."""
    try:
        return classad2.parseOne(text)
    except (classad2.ClassAdException, ValueError) as exc:
        raise ClassAdError(f"cannot parse ClassAd: {exc}") from None


def new_ad(attrs: dict[str, Any] | None = None) -> Any:
    """A ClassAd from a dict of Python values (str, int, float, bool, ExprTree, ...)."""
    ad = classad2.ClassAd()
    for key, value in (attrs or {}).items():
        ad[key] = value
    return ad


def ad_to_json(ad: Any) -> dict[str, Any]:
    """An ad in HTCondor's JSON ClassAd form (condor_status -json): plain values as
    themselves, lists and nested ads as JSON, other expressions as "\\/Expr(...)\\/"."""
    result: dict[str, Any] = json.loads(ad.printJson())
    return result


def ad_from_json(data: dict[str, Any]) -> Any:
    """The inverse of :func:`ad_to_json`: expressions come back as expressions."""
    try:
        # json.dumps writes "/" bare; HTCondor's reader knows an expression by "\\/Expr(".
        text = json.dumps(data).replace('"/Expr(', '"\\/Expr(').replace(')/"', ')\\/"')
        return classad2.parseOne(text, classad2.ParserType.JSON)
    except (ValueError, TypeError, classad2.ClassAdException) as exc:
        raise ClassAdError(f"not a JSON ClassAd: {exc}") from None


def evaluate(expr: Any, my: Any = None, target: Any = None) -> Any:
    """Evaluate ``expr`` (text or ExprTree) with MY = ``my`` and TARGET = ``target``.

    Unscoped references resolve in MY first, then TARGET, as HTCondor does.
    A string that does not parse evaluates to ``Value.Error`` rather than raising:
    a policy expression that cannot be parsed is never true.
    """
    if isinstance(expr, str):
        try:
            expr = parse_expr(expr)
        except ClassAdError:
            return classad2.Value.Error
    if my is None:
        my = classad2.ClassAd()
    return expr.eval(my, target)


def is_true(value: Any) -> bool:
    """True only for the boolean True (or a non-zero number, as ClassAd's bool()).

    Undefined and Error are *not* true; neither is a string or a list.
    """
    if value is True:
        return True
    if isinstance(value, bool | classad2.Value):
        return False
    if isinstance(value, int | float):
        return value != 0
    return False


def is_undefined(value: Any) -> bool:
    return value is classad2.Value.Undefined


def is_error(value: Any) -> bool:
    return value is classad2.Value.Error


def to_number(value: Any) -> float | None:
    """A numeric result as float; booleans count as 0/1; anything else is None."""
    if isinstance(value, classad2.Value):
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    return None


def quote(text: str) -> str:
    """A ClassAd string literal for ``text``."""
    return str(classad2.quote(text))


def lookup_bool(value: object) -> bool | None:
    """An ad's value as a boolean the way HTCondor's LookupBool takes it (classad's
    IsBooleanValueEquiv): a boolean, or an integer or real, true where not 0; None for
    anything else (the caller's default then holds)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return None
