"""A slot's waiting preempting claim: how it takes the slot, and how it is dropped.

condor_startd (src/condor_startd.V6) keeps such a claim as the slot's r_pre with the
schedd's REQUEST_CLAIM held open. It has no lease running while it waits (its ClaimLease
timer starts in Claim::beginClaim, when it becomes the slot's claim); when it goes
without taking the slot (remove_pre) the held request is answered NOT_OK at once.

Once the current claim is gone (Resource::leave_preempting_state), START is evaluated
against the waiting claim's job: only a START that is defined and false refuses it (a
drain's START, False unless the drain gave one, among them); the slot then goes to the
Owner state (22/25) and the claim's holder is told NOT_OK. Nothing else bounds the wait:
no timer of the startd's runs out; the schedd gives up (its REQUEST_CLAIM_TIMEOUT) by
closing the request's connection, which withdraws the claim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd import classads
from execd.policy import actions as act
from execd.policy.slot import Now, Slot

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

Actions = list[act.Action]
START_FALSE = "START is false"


def drop_preempting_claim(slot: Slot, why: str, out: Actions, reason: str = "") -> None:
    """The waiting preempting claim (if any) is gone: released by its holder, replaced by
    a better one, refused by START at the takeover, dropped by a shutdown. As
    condor_startd's remove_pre (its REQUEST_CLAIM refused at once), its holder is told
    (`reason`, else `why`): the daemon forgets the claim."""
    pending = slot.preempting_claim
    if pending is None:
        return
    slot.preempting_claim = None
    out.append(act.LogEvent("preempting_claim_withdrawn", {"slot": slot.name, "why": why}))
    out.append(act.NotifyClaimHolder(slot.name, str(pending.id), reason or why))


def may_take_slot(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> bool:
    """The current claim is gone: may the waiting claim (if any) take the slot? Not
    during a shutdown; nor when START is defined and false for its job (then it is
    dropped, its holder told), as condor_startd's leave_preempting_state: a START that is
    true or undefined lets it."""
    pending = slot.preempting_claim
    if pending is None or engine.shutting_down is not None:
        return False
    if engine.draining and not engine.scavenging:
        refused = True  # a drain's START is False unless it gave its own
    else:
        value = engine._eval(slot, "START", engine.machine_ad(slot, now), pending.request_ad,
                             out)  # fmt: skip
        number = classads.to_number(value)
        refused = number is not None and number == 0
    if refused:
        drop_preempting_claim(slot, START_FALSE, out)
    return not refused


def take_slot(slot: Slot, now: Now, out: Actions) -> None:
    """The waiting preempting claim becomes the slot's claim. Its lease starts now: as on
    condor_startd (Claim::beginClaim), none runs while it waits, however long the
    retirement it waits for."""
    assert slot.preempting_claim is not None
    slot.claim, slot.preempting_claim = slot.preempting_claim, None
    slot.claim.lease.renew(now.mono)
    slot.claimed_once = True
    out.append(act.ClaimTookSlot(slot.name, str(slot.claim.id)))
