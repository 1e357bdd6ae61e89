"""Chirp's delayed updates: `condor_chirp set_job_attr_delayed` / `get_job_attr_delayed`.

As condor_starter (io_proxy_handler.cpp, jic_shadow.cpp recordDelayedUpdate,
getDelayedUpdate, publishUpdateAd), served to every job unless its ad says
`WantDelayedUpdates = false` or ENABLE_CHIRP_DELAYED is false (chirp_config.py): an
attribute whose name matches CHIRP_DELAYED_UPDATE_PREFIX (`Chirp*` by default, any
case) is kept by the starter and sent with
its next update to the shadow, nested as `ChirpDelayedAttrs = [ name = expr; ... ]`
(25.3 and later); the shadow checks each name again (the prefix, protected
attributes) and puts it into the job ad, and from there into the schedd's. At most
CHIRP_DELAYED_UPDATE_MAX_ATTRS (100) different names over the job's life.

Answers, condor_starter's: 0 when recorded, and 0 too when the value does not parse
(nothing is recorded); 1 when the name is refused (prefix, too many names); -127 for a
value over 993 bytes (ENAMETOOLONG, which Chirp has no code for). get_job_attr_delayed
reads the pending value, else the job ad the starter got (get_job_info), else -3.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from execd._htcondor import classad2
from execd.classads import ClassAdError, parse_expr
from execd.wire.chirp_config import DEFAULT_MAX_ATTRS, DEFAULT_PREFIX
from execd.wire.chirp_protocol import ATTR_NAME
from execd.wire.classad_codec import WireAd, unparse_old

PREFIXES = (DEFAULT_PREFIX,)
MAX_ATTRS = DEFAULT_MAX_ATTRS
MAX_VALUE = 993
NESTED = "ChirpDelayedAttrs"
RECORDED, REFUSED, VALUE_TOO_LONG = 0, 1, -127


def name_allowed(name: str, prefixes: tuple[str, ...] = PREFIXES) -> bool:
    """contains_anycase_withwildcard: a pattern with one `*` matches any middle part."""
    lower = name.lower()
    for pattern in prefixes:
        head, star, tail = pattern.lower().partition("*")
        if not star and lower == head:
            return True
        if star and len(lower) >= len(head) + len(tail) and lower.startswith(head) \
                and lower.endswith(tail):  # fmt: skip
            return True
    return False


class DelayedUpdates:
    """One job's pending delayed updates (name -> expression text)."""

    def __init__(self, job_wire: Mapping[str, str], *, prefixes: tuple[str, ...] = PREFIXES,
                 max_attrs: int = MAX_ATTRS) -> None:  # fmt: skip
        self.prefixes, self.max_attrs = prefixes, max_attrs
        self.job_wire = {k.lower(): v for k, v in job_wire.items()}
        self.pending: dict[str, tuple[str, Any]] = {}  # lower name -> (name, ExprTree)
        self.names: set[str] = set()  # every name recorded, for MAX_ATTRS

    def record(self, name: str, expr: str) -> int:
        if len(expr.encode()) > MAX_VALUE:
            return VALUE_TOO_LONG
        try:
            value = parse_expr(expr)
        except ClassAdError:
            return RECORDED  # condor_starter answers success and records nothing
        # A name that is no ClassAd name, or a value old syntax cannot carry, would make
        # an update the shadow cannot read (it asserts, and the job is requeued).
        if not ATTR_NAME.fullmatch(name) or not name_allowed(name, self.prefixes) \
                or not _carried(name, value):  # fmt: skip
            return REFUSED
        if name not in self.names:
            if len(self.names) >= self.max_attrs:
                return REFUSED
            self.names.add(name)
        self.pending[name.lower()] = (name, value)
        return RECORDED

    def lookup(self, name: str) -> str | None:
        if (found := self.pending.get(name.lower())) is not None:
            return str(found[1])
        return self.job_wire.get(name.lower())

    def take(self) -> WireAd:
        """What the next update to the shadow carries (nothing when none is pending)."""
        if not self.pending:
            return {}
        nested = classad2.ClassAd()
        for name, value in self.pending.values():
            nested[name] = value
        self.pending.clear()
        return {NESTED: unparse_old(nested)}


def _carried(name: str, value: Any) -> bool:
    """Does `name = value`, nested and printed in old syntax as the update carries it,
    read back as the same expression? (Old syntax has no escapes but \\": in a nested
    ad "x\\" ends no string.)"""
    nested = classad2.ClassAd()
    nested[name] = value
    try:
        back = classad2.parseOne(f"{NESTED} = {unparse_old(nested)}",
                                 parser=classad2.ParserType.Old)  # fmt: skip
        inner = back[NESTED] if back is not None and NESTED in back else None
        return isinstance(inner, classad2.ClassAd) and list(inner.keys()) == [name] \
            and str(inner.lookup(name)) == str(value)  # fmt: skip
    except (classad2.ClassAdException, ValueError, KeyError):
        return False
