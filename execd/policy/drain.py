"""Draining (seed 003 "Drained State"; HTCONDOR_BEHAVIOUR.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd.policy.slot import Slot
from execd.policy.states import State

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine


def drain_done(engine: PolicyEngine, slot: Slot) -> bool:
    """A drained slot is done when no other slot still holds a claim."""
    return not any(s.claim is not None for s in engine.slots.values() if s is not slot
                   and s.state != State.DRAINED)
