"""Partitionable-slot preemption: the negotiator's ALLOW_PSLOT_PREEMPTION, execd's side.

With ALLOW_PSLOT_PREEMPTION = True the negotiator may match a job that asks for it
(WantPslotPreemption) with a p-slot too small for it, counting the resources of d-slots
it may preempt (their CurrentRank below the job's RANK, or equal and the
PREEMPTION_REQUIREMENTS of a better-priority submitter; no RetirementTimeRemaining; not
Preempting). It reads them from the p-slot's Child<Attr> lists and the d-slots' claim
ids from the p-slot's private ChildClaimIds (execd.wire.startd_ads), paired by
position, and hands the schedd the p-slot's claim id plus those d-slots' ids. The
schedd's REQUEST_CLAIM to the p-slot then carries, after its request ad, their count and
each id (a secret).

As condor_startd 25.x (command.cpp request_claim): every id must name a slot (its
preempting id or its current claim's) and that slot must have no retirement time left;
otherwise the whole request is refused and nothing is killed. condor_startd answers
such a refusal with nothing: it closes the connection (its `goto abort`, before any
reply), and its abort_claim moves the p-slot to Owner ("claiming protocol failed") with
a new claim object, then on to Unclaimed; the ad it publishes then shows the d-slots'
retirement time, so the negotiator stops matching them. execd does the same (`abort`):
closes without an answer, the p-slot passes Owner, gets a new offer, and its ad goes
out at once; the schedd logs "Response problem from startd when requesting claim" and
drops the match, as with condor_startd. Then each d-slot's claim is killed ("Preempted
for a Priority user" on condor_startd, whatever the basis: its kill_claim, straight to
Preempting/Killing), and the p-slot carves the new d-slot from the resources they
return. Two differences, both on the safe side: execd refuses an id of a slot that is
no d-slot of this p-slot (condor_startd would kill it and give its resources to its own
parent), and it carves only once the killed d-slots are gone (their jobs dead and their
cgroups empty), where condor_startd moves their resources back at once while their
starters still run. The REQUEST_CLAIM is answered after that. condor_startd counts
these kills in no preemption counter (JobPreemptions & co.); nor does execd.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from execd import log
from execd.claims.ids import parse_claim_id
from execd.daemon.policy_glue import now
from execd.errors import ExecdError
from execd.policy.claiming import abort_claim
from execd.policy.commands import kill_claim
from execd.policy.retirement import retirement_remaining
from execd.policy.states import State
from execd.wire.advertiser import wait_event
from execd.wire.server import Peer

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember

logger = log.get_logger("pool")

# the killed claims' eviction reason (NotifyClaimHolder, log; the shadows' vacate reason
# by execd.daemon.vacate_reasons)
REASON = "pslot_preemption"
# How long the carve waits for the killed d-slots to go: condor_startd keeps the schedd's
# claim request waiting up to MATCH_TIMEOUT (120 s) less 10 s.
TAKE_BACK_WAIT_S = 110.0


class PslotPreemptionError(ExecdError):
    """A REQUEST_CLAIM's preempting claim ids cannot all be preempted; why (no secret)."""


def public_id(claim_id: str) -> str:
    """What may be logged of a claim id from the wire: its public part, never the secret."""
    try:
        return parse_claim_id(claim_id).session_id
    except ValueError:
        return "a malformed claim id"


def slot_of(member: PoolMember, claim_id: str) -> str | None:
    """The slot whose offer (its preempting claim id) or current claim is `claim_id`, as
    condor_startd's get_by_any_id; secrets compared in constant time."""
    wanted = claim_id.encode()
    for slot, offer in member.offers.items():
        if hmac.compare_digest(offer.full().encode(), wanted):
            return slot
    for full, (slot, _claim) in member.daemon.jobs.claims.items():
        if hmac.compare_digest(full.encode(), wanted):
            return slot
    return None


def preempted_dslots(member: PoolMember, pslot: str, claim_ids: Sequence[str]) -> list[str]:
    """The d-slots of `pslot` that `claim_ids` name, each once, in their order; raises
    PslotPreemptionError naming the first that cannot be preempted."""
    engine, moment = member.daemon.engine, now()
    names: list[str] = []
    for number, claim_id in enumerate(claim_ids, 1):
        which = f"preempting claim {number} of {len(claim_ids)} ({public_id(claim_id)})"
        name = slot_of(member, claim_id)
        if name is None or name not in engine.slots:
            raise PslotPreemptionError(f"{which} is no claim of any slot")
        if not name.startswith(f"{pslot}_"):
            raise PslotPreemptionError(f"{which} is {name}'s, not a dynamic slot of {pslot}")
        left = retirement_remaining(engine, engine.slot(name), moment)
        if left > 0:
            raise PslotPreemptionError(f"{name} still has {left} s of retirement time: it "
                                         "cannot be preempted at once")  # fmt: skip
        if name not in names:
            names.append(name)
    return names


class PslotPreemption:
    """Takes back a p-slot's d-slots for a REQUEST_CLAIM that preempts them. One claim of
    a p-slot at a time (`turn`): a second REQUEST_CLAIM of the same p-slot waits, so it
    cannot carve what the first freed for its own job."""

    def __init__(self, member: PoolMember) -> None:
        self.member = member
        self._locks: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def turn(self, pslot: str, claim_id: str) -> AsyncIterator[bool]:
        """The REQUEST_CLAIM of `pslot` with `claim_id` takes its turn (one at a time, as
        condor_startd handles them); True while `claim_id` is still `pslot`'s offer, False
        when a refused request before it revoked that offer (`abort`): an unknown claim id
        then, which condor_startd answers NOT_OK."""
        async with self._locks.setdefault(pslot, asyncio.Lock()):
            yield self.member.offer_for(claim_id) == pslot

    def abort(self, pslot: str) -> None:
        """The refused REQUEST_CLAIM is over, unanswered: `pslot` through Owner to
        Unclaimed (claiming.abort_claim), a new offer in place of the one the schedd
        used, and the ads published now."""
        member = self.member
        engine = member.daemon.engine
        if pslot in engine.slots:
            member.daemon.execute(abort_claim(engine, engine.slot(pslot), now()))
        member.daemon.jobs.matches.claimed(pslot)  # a Matched slot's match is over
        member.replace_offer(pslot)
        member.changed()

    async def take_back(self, pslot: str, claim_ids: Sequence[str], peer: Peer) -> bool:
        """Kill the claims of the d-slots `claim_ids` name and wait until they are gone;
        False (logged, nothing killed) when one cannot be preempted."""
        member = self.member
        try:
            names = preempted_dslots(member, pslot, claim_ids)
        except PslotPreemptionError as exc:
            logger.warning("pslot_preemption_refused", slot=pslot, user=peer.user,
                           session=peer.sid, why=str(exc))  # fmt: skip
            return False
        engine = member.daemon.engine
        for name in names:
            if engine.slot(name).state is State.CLAIMED:  # a Preempting one ends anyway
                # its shadow is told "Preempted for a Priority user" (vacate_reasons)
                member.daemon.execute(kill_claim(engine, name, now(), REASON))
        logger.info("pslot_preempting", slot=pslot, dslots=names, user=peer.user)
        member.changed()
        deadline = time.monotonic() + TAKE_BACK_WAIT_S
        while (left := [n for n in names if n in engine.slots]) and time.monotonic() < deadline:
            member.state_changed.clear()
            await wait_event(member.state_changed, deadline - time.monotonic())
        if left:  # the carve below says whether what did come back is enough
            logger.warning("pslot_preemption_slow", slot=pslot, still=left,
                           waited_s=TAKE_BACK_WAIT_S)  # fmt: skip
        else:
            logger.info("pslot_preempted", slot=pslot, dslots=names)
        return True
