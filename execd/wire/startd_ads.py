"""What execd sends the collector for one slot: its public ad and its private ad.

The public ad is execd's slot ad (execd.slots) with the daemon's address added
(MyAddress, StartdIpAddr) and every private attribute left out. The private ad is what
only the negotiator may read, as HTCondor's startd builds it (Resource::publish_private):
MyType, Name, the address, ClaimId (the slot's current claim id, secret included),
Capability = ClaimId (the old name the negotiator still reads) and, for a partitionable
slot, ChildClaimIds (its dynamic slots' claim ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from execd.claims.ids import ClaimId
from execd.errors import LocalProtocolError
from execd.wire.classad_codec import WireAd, from_classad, from_values, public_part


def advertised_pair(
    slot_ad: Any,
    *,
    address: str,
    claim_id: ClaimId,
    child_claim_ids: Sequence[ClaimId] = (),
) -> tuple[WireAd, WireAd]:
    """(public, private) wire ads for one slot ad (a classad2.ClassAd)."""
    public = public_part(from_classad(slot_ad))
    for needed in ("Name", "MyType"):
        if needed not in public:
            raise LocalProtocolError(f"slot ad has no {needed}: the collector cannot key it")
    public.update(from_values({"MyAddress": address, "StartdIpAddr": address}))
    secret = from_values({"ClaimId": claim_id.full()})
    private: WireAd = {"MyType": public["MyType"], "Name": public["Name"],
                       **from_values({"MyAddress": address, "StartdIpAddr": address}),
                       **secret, "Capability": "ClaimId"}  # fmt: skip
    if public.get("PartitionableSlot") == "true":
        private["ChildClaimIds"] = from_values({"C": [c.full() for c in child_claim_ids]})["C"]
    return public, private
