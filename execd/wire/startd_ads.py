"""What execd sends the collector for one slot: its public ad and its private ad.

The public ad is execd's slot ad (execd.slots) with the daemon's address added
(MyAddress, StartdIpAddr) and every private attribute left out. The private ad is what
only the negotiator may read, as HTCondor's startd builds it (Resource::publish_private):
MyType, Name, the address, ClaimId (the slot's current claim id, secret included),
Capability = ClaimId (the old name the negotiator still reads) and, for a partitionable
slot, ChildClaimIds: its dynamic slots' preempting claim ids (HTCondor's r_pre, what a
claimed slot offers), in the byte order of their names, the order of its Child<Attr>
lists; with ALLOW_PSLOT_PREEMPTION the negotiator pairs them by position and hands the
schedd those of the d-slots it preempts (execd.daemon.pool_pslot_preemption), once
the private ad's NumDynamicSlots (published there too, as condor_startd does) says it
has them all.

The negotiator matches a job only with a slot whose Requirements hold, and condor_startd
publishes Requirements = Start && WithinResourceLimits on every slot: a job that asks
for more CPUs, memory, disk or GPUs than the slot has is not matched there (a
partitionable slot whose CPUs are all carved off matches nothing, and a claimed dynamic
slot is considered for RANK preemption instead). execd's ad keeps its policy's
Requirements (its Start, False while Matched, Preempting or Drained); the public ad ands
it with WithinResourceLimits (`Start && WithinResourceLimits`, in condor_startd's words),
as condor_startd 25.x publishes it less the common-files catalog term (execd has no
catalogs: a job's RequestDisk is compared whole). The knob WithinResourceLimits
replaces it on every slot; STARTD_JOB_HAS_REQUEST_ATTRS builds HTCondor's older form,
in which a job's _condor_Request<Res> overrides its Request<Res>.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from execd.claims.ids import ClaimId
from execd.errors import LocalProtocolError
from execd.slots.layout import STANDARD
from execd.starter.spec import SCRATCH_DIR_PLACEHOLDER
from execd.wire.classad_codec import WireAd, from_classad, from_values, public_part
from execd.wire.slot_resources import resource_names

_STANDARD_LOWER = frozenset(n.lower() for n in STANDARD)  # attribute names are case-blind
STANDARD_LIMITS = (
    "MY.Cpus > 0 && TARGET.RequestCpus <= MY.Cpus && MY.Memory > 0"
    " && TARGET.RequestMemory <= MY.Memory && MY.Disk > 0 && TARGET.RequestDisk <= MY.Disk"
)


# STARTD_JOB_HAS_REQUEST_ATTRS: a job's _condor_Request<Res> overrides its Request<Res>;
# without RequestCpus it asks for one CPU, without RequestMemory/RequestDisk nothing fits.
_OVERRIDE = "ifThenElse(TARGET._condor_Request{r} =!= UNDEFINED,MY.{r} > 0 && " \
    "TARGET._condor_Request{r} <= MY.{r},ifThenElse(TARGET.Request{r} =!= UNDEFINED," \
    "MY.{r} > 0 && TARGET.Request{r} <= MY.{r},{otherwise}))"  # fmt: skip
REQUEST_ATTRS_LIMITS = " && ".join(_OVERRIDE.format(r=r, otherwise=o) for r, o in
                                   (("Cpus", "1 <= MY.Cpus"), ("Memory", "FALSE"),
                                    ("Disk", "FALSE")))  # fmt: skip


def within_resource_limits(slot_ad: Any, *, configured: str | None = None,
                           job_has_request_attrs: bool = False) -> str:  # fmt: skip
    """WithinResourceLimits: the standard resources, then one term per other machine
    resource (GPUs, MACHINE_RESOURCE_<name>) that a job need not request, as
    condor_startd's MachAttributes::withinLimitsExpression builds it: with
    `job_has_request_attrs` (STARTD_JOB_HAS_REQUEST_ATTRS) in the form that reads the
    job's _condor_Request<Res> first; `configured` (the knob WithinResourceLimits) replaces it."""
    if configured:
        return configured
    names = [n for n in resource_names(slot_ad) if n.lower() not in _STANDARD_LOWER]
    if job_has_request_attrs:
        return REQUEST_ATTRS_LIMITS + "".join(
            f" && (TARGET.Request{n} is UNDEFINED ||MY.{n} >= ifThenElse(TARGET._condor_"
            f"Request{n} is UNDEFINED,TARGET.Request{n},TARGET._condor_Request{n}))"
            for n in names)  # fmt: skip
    return STANDARD_LIMITS + "".join(
        f" && (TARGET.Request{n} =?= undefined || MY.{n} >= TARGET.Request{n})" for n in names)


def advertised_pair(
    slot_ad: Any,
    *,
    address: str,
    claim_id: ClaimId,
    child_claim_ids: Mapping[str, ClaimId] | None = None,
    limits: Mapping[str, Any] | None = None,
) -> tuple[WireAd, WireAd]:
    """(public, private) wire ads for one slot ad (a classad2.ClassAd); `child_claim_ids`:
    a p-slot's d-slots (short names) and the claim id each offers; `limits`: the keywords
    of within_resource_limits (the knobs)."""
    public = public_part(from_classad(slot_ad))
    for needed in ("Name", "MyType"):
        if needed not in public:
            raise LocalProtocolError(f"slot ad has no {needed}: the collector cannot key it")
    # CondorScratchDir: what a job's $$(CondorScratchDir) becomes at match time; the
    # starter puts the job's scratch directory in its place (not known before).
    public.update(from_values({"MyAddress": address, "StartdIpAddr": address,
                               "CondorScratchDir": SCRATCH_DIR_PLACEHOLDER}))
    public["WithinResourceLimits"] = within_resource_limits(slot_ad, **(limits or {}))
    requirements = public.get("Requirements", "true")
    if requirements == public.get("Start"):  # as condor_startd words it
        public["Requirements"] = "Start && WithinResourceLimits"
    elif requirements != "false":  # a slot that matches nothing stays so
        public["Requirements"] = f"({requirements}) && WithinResourceLimits"
    secret = from_values({"ClaimId": claim_id.full()})
    private: WireAd = {"MyType": public["MyType"], "Name": public["Name"],
                       **from_values({"MyAddress": address, "StartdIpAddr": address}),
                       **secret, "Capability": "ClaimId"}  # fmt: skip
    if public.get("PartitionableSlot") == "true":
        children = sorted((child_claim_ids or {}).items(), key=lambda kv: kv[0].encode())
        private["ChildClaimIds"] = from_values({"C": [c.full() for _, c in children]})["C"]
        # the negotiator counts the ids against the private ad's own NumDynamicSlots
        private["NumDynamicSlots"] = str(len(children))
    return public, private
