"""Which slot ads a cron job's ad is merged into (seed 003, "Daemon ClassAd Hooks").

An ad chooses its slots with the first of these it carries:

1. ``SlotMergeConstraint``: every slot for which the expression is true, evaluated with
   the cron ad as MY and the slot ad as TARGET;
2. ``SlotName`` (or ``Name``): every slot whose Name starts with that string;
3. ``SlotTypeId``: every slot with that SlotTypeId;
4. ``SlotId``: every slot with that SlotId.

An ad with none of them goes into every slot. Untargeted ads are applied first and
targeted ones after them, so that "Value=10 everywhere, Value=1 in slot 1" holds
whatever order the job printed them in. The targeting attributes themselves are not
merged (they would overwrite the slot's own Name and SlotId).

Pure: ads and slot ads in, per-slot attributes (name -> expression text) out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

from execd.classads import ClassAdError, evaluate, is_true, new_ad, parse_expr, to_number

__all__ = ["TARGETING_ATTRS", "ad_matches_slot", "merge_into_slots", "slot_matcher"]

TARGETING_ATTRS = ("SlotMergeConstraint", "SlotName", "Name", "SlotTypeId", "SlotId")
_TARGETING_LOWER = frozenset(a.lower() for a in TARGETING_ATTRS)


@cache
def _expr(text: str) -> Any:
    return parse_expr(text)


def _lookup(attrs: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in attrs.items():
        if key.lower() == lowered:
            return value
    return None


def _value_of(text: str, my: Any = None) -> Any:
    try:
        return evaluate(_expr(text), my)
    except ClassAdError:
        return None


def _slot_number(slot_ad: Any, attr: str) -> float | None:
    value = slot_ad.get(attr)  # a literal is read directly: 4x cheaper than evaluating
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return to_number(evaluate(_expr(attr), slot_ad))


def is_targeted(attrs: Mapping[str, str]) -> bool:
    return any(key.lower() in _TARGETING_LOWER for key in attrs)


class _Target:
    """How one cron ad picks its slots, worked out once (not once per slot)."""

    def __init__(self, attrs: Mapping[str, str]) -> None:
        self.constraint: Any = None
        self.my: Any = None
        self.name: str | None = None
        self.number: tuple[str, float | None] | None = None
        self.everywhere = False
        constraint = _lookup(attrs, "SlotMergeConstraint")
        name = _lookup(attrs, "SlotName") or _lookup(attrs, "Name")
        if constraint is not None:
            self.constraint = _expr(constraint)
            self.my = new_ad({k: _expr(v) for k, v in attrs.items()})
        elif name is not None:
            wanted = _value_of(name)
            self.name = wanted if isinstance(wanted, str) else None
            self.number = None if self.name is not None else ("", None)  # matches nothing
        else:
            for attr in ("SlotTypeId", "SlotId"):
                text = _lookup(attrs, attr)
                if text is not None:
                    self.number = (attr, to_number(_value_of(text)))
                    break
            else:
                self.everywhere = True

    def matches(self, slot_ad: Any) -> bool:
        if self.everywhere:
            return True
        if self.constraint is not None:
            return is_true(evaluate(self.constraint, self.my, slot_ad))
        if self.name is not None:
            slot_name = slot_ad.get("Name")
            if not isinstance(slot_name, str):
                slot_name = evaluate(_expr("Name"), slot_ad)
            return isinstance(slot_name, str) and slot_name.startswith(self.name)
        assert self.number is not None
        attr, wanted = self.number
        return wanted is not None and wanted == _slot_number(slot_ad, attr)


def slot_matcher(attrs: Mapping[str, str]) -> Callable[[Any], bool]:
    """A test of slot ads for one cron ad, for use on many slots."""
    return _Target(attrs).matches


def ad_matches_slot(attrs: Mapping[str, str], slot_ad: Any) -> bool:
    """Whether a cron ad (attribute -> expression text) is merged into SLOT_AD."""
    return _Target(attrs).matches(slot_ad)


def merge_into_slots(
    ads: Sequence[Mapping[str, str]], slots: Mapping[str, Any]
) -> dict[str, dict[str, str]]:
    """Per slot name, the attributes the ADS give it (later ads override earlier ones).

    ADS are in publication order; SLOTS maps a slot's name to its ClassAd.
    """
    ordered = [a for a in ads if not is_targeted(a)] + [a for a in ads if is_targeted(a)]
    merged: dict[str, dict[str, str]] = {name: {} for name in slots}
    for attrs in ordered:
        payload = {k: v for k, v in attrs.items() if k.lower() not in _TARGETING_LOWER}
        if not payload:
            continue
        target = _Target(attrs)
        for slot_name, slot_ad in slots.items():
            if target.matches(slot_ad):
                merged[slot_name].update(payload)
    return merged
