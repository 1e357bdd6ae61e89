"""A slot's waiting preempting claim: how it takes the slot, and how it is dropped.

condor_startd (src/condor_startd.V6) keeps such a claim as the slot's r_pre with the
schedd's REQUEST_CLAIM held open. It has no lease running while it waits (its ClaimLease
timer starts in Claim::beginClaim, when it becomes the slot's claim); when it goes
without taking the slot (remove_pre) the held request is answered NOT_OK at once.
"""

from __future__ import annotations

from execd.policy import actions as act
from execd.policy.slot import Now, Slot

Actions = list[act.Action]


def drop_preempting_claim(slot: Slot, why: str, out: Actions, reason: str = "") -> None:
    """The waiting preempting claim (if any) is gone: released by its holder, replaced by
    a better one, dropped by a drain or a shutdown. As condor_startd's remove_pre (its
    REQUEST_CLAIM refused at once), its holder is told (`reason`, else `why`): the
    daemon forgets the claim."""
    pending = slot.preempting_claim
    if pending is None:
        return
    slot.preempting_claim = None
    out.append(act.LogEvent("preempting_claim_withdrawn", {"slot": slot.name, "why": why}))
    out.append(act.NotifyClaimHolder(slot.name, str(pending.id), reason or why))


def take_slot(slot: Slot, now: Now, out: Actions) -> None:
    """The waiting preempting claim becomes the slot's claim. Its lease starts now: as on
    condor_startd (Claim::beginClaim), none runs while it waits, however long the
    retirement it waits for."""
    assert slot.preempting_claim is not None
    slot.claim, slot.preempting_claim = slot.preempting_claim, None
    slot.claim.lease.renew(now.mono)
    slot.claimed_once = True
    out.append(act.ClaimTookSlot(slot.name, str(slot.claim.id)))
