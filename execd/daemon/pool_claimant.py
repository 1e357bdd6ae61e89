"""Who holds a claimed slot, in its public ad as HTCondor's startd publishes it
(Claim::publish and Claim::publishPreemptingClaim).

The negotiator considers a claimed slot for preemption only with a RemoteUser, and
preempts for RANK when the slot's Rank of a job beats its CurrentRank. HTCondor 25's
startd takes the claim's owner from the request ad's `User` (user@domain), so
RemoteOwner and RemoteUser are both `User` (condor_status on the pool tier's own
condor_startd shows RemoteOwner "execdtest@vm"); the job's `Owner` stands in only for a
request without `User`. An accounting group is qualified with the user's domain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from execd.policy.slot import Claim, Slot


@dataclass(frozen=True)
class Claimant:
    """The client of one claim, from its request (job) ad."""

    user: str | None  # RemoteUser: user@domain
    owner: str | None  # RemoteOwner
    group: str | None  # AccountingGroup, qualified with the user's domain

    @classmethod
    def of(cls, request_ad: Any, domain: str) -> Claimant:
        def text(attr: str) -> str | None:
            value = request_ad.get(attr) if request_ad is not None else None
            return value if isinstance(value, str) and value else None

        user, owner, group = text("User"), text("Owner"), text("AccountingGroup")
        if user is None and owner is not None:
            user = f"{owner}@{domain}"
        if group is not None and user is not None and "@" in user:
            group += user[user.rindex("@"):]
        return cls(user=user, owner=text("User") or owner, group=group)

    def attributes(self, prefix: str) -> dict[str, str]:
        """<prefix>User, <prefix>Owner, <prefix>AccountingGroup (plain AccountingGroup
        for the current claim, as the startd names it)."""
        group = "AccountingGroup" if prefix == "Remote" else f"{prefix}AccountingGroup"
        named = {f"{prefix}User": self.user, f"{prefix}Owner": self.owner, group: self.group}
        return {name: value for name, value in named.items() if value is not None}


def claimant_attributes(slot: Slot, domain: str) -> dict[str, Any]:
    """CurrentRank and the Remote* attributes of a claimed slot; Preempting* while a
    higher-ranked claim waits for it. {} for an unclaimed slot."""
    if slot.claim is None:
        return {}
    out: dict[str, Any] = {"CurrentRank": float(slot.claim.rank)}
    out |= _client(slot.claim, domain, "Remote")
    if slot.preempting_claim is not None:
        out["PreemptingRank"] = float(slot.preempting_claim.rank)
        out |= _client(slot.preempting_claim, domain, "Preempting")
    return out


def _client(claim: Claim, domain: str, prefix: str) -> dict[str, str]:
    return Claimant.of(claim.request_ad, domain).attributes(prefix)
