"""The ClassAd each slot's policy is evaluated against, kept current at little cost.

Setting a ClassAd attribute costs microseconds, and evaluating with a TARGET ad costs
ten times an evaluation without one; a policy pass over 1,000 slots does both thousands
of times. So, exactly where it cannot change a result:

- only the policy attributes some policy expression references are written on a normal
  pass (facts are all in the ad already); callers that evaluate other expressions
  against the ad (a drain check, a job's MaxJobRetirementTime) ask for a full refresh;
- an expression that names no TARGET attribute and whose every attribute is found in
  the machine ad is evaluated without the job's ad: HTCondor looks unscoped names up in
  MY first, so TARGET could not change its value.
"""

from __future__ import annotations

from typing import Any

from execd import classads
from execd.policy.slot import POLICY_ATTRIBUTES, Slot

_MISSING = object()


def own_facts(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts without what the engine itself publishes (State, MyCurrentTime, ...):
    the engine's values win, and the daemon's copies would only force rewrites."""
    return {k: v for k, v in facts.items() if k not in POLICY_ATTRIBUTES}


def references(expr: Any) -> frozenset[str]:
    """The attribute names ``expr`` refers to, lower-cased, scoped ones as 'target.x'."""
    return frozenset(r.lower() for r in classads.new_ad().externalRefs(expr))


def unscoped(refs: frozenset[str]) -> frozenset[str]:
    return frozenset(r.removeprefix("my.") for r in refs if not r.startswith("target."))


def uses_target(refs: frozenset[str]) -> bool:
    return any(r.startswith("target.") for r in refs)


class AdCache:
    """Which policy attributes matter, and whether an expression needs the TARGET ad."""

    def __init__(self, referenced: frozenset[str]) -> None:
        self.referenced = referenced  # lower-cased names some policy expression reads
        self._hot: dict[str, bool] = {}

    def hot(self, key: str) -> bool:
        found = self._hot.get(key)
        if found is None:
            found = self._hot[key] = key.lower() in self.referenced
        return found

    def refresh(self, slot: Slot, attrs: dict[str, Any], *, full: bool) -> Any:
        """Write ``attrs`` into the slot's ad: the referenced ones, or all when ``full``."""
        if slot.ad is None:
            slot.ad, slot.ad_policy_values = classads.new_ad(slot.facts), {}
            slot.ad_keys = {k.lower() for k in slot.facts}
            slot.target_free.clear()
            full = True
        ad, last = slot.ad, slot.ad_policy_values
        if len(last) > len(attrs) or any(k not in attrs for k in last):
            for gone in [k for k in last if k not in attrs]:
                del ad[gone]
                del last[gone]
                slot.target_free.clear()
        for key, value in attrs.items():
            old = last.get(key, _MISSING)
            if old is value or old == value or not (full or self.hot(key)):
                continue
            ad[key] = value
            last[key] = value
            if old is _MISSING:
                slot.ad_keys.add(key.lower())
                slot.target_free.clear()
        return ad

    def update_facts(self, slot: Slot, facts: dict[str, Any]) -> None:
        """Write the facts that changed into the ad (the daemon sends all of them each poll);
        a fact that went away rebuilds the ad."""
        old, ad = slot.facts, slot.ad
        facts = own_facts(facts)
        slot.facts = facts
        if ad is None:
            return
        if len(old) > len(facts) or any(k not in facts for k in old):
            slot.ad = None
            return
        for key, value in facts.items():
            before = old.get(key, _MISSING)
            if before is value or before == value:
                continue
            ad[key] = value
            if before is _MISSING:
                slot.ad_keys.add(key.lower())
                slot.target_free.clear()

    def target_free(self, slot: Slot, name: str, refs: frozenset[str]) -> bool:
        """Evaluating ``refs`` in the slot's ad alone gives the same value as with TARGET."""
        found = slot.target_free.get(name)
        if found is None:
            found = not uses_target(refs) and unscoped(refs) <= slot.ad_keys
            slot.target_free[name] = found
        return found
