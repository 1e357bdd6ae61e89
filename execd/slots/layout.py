"""Slot layout: SLOT_TYPE_<N> specs divided over MachineFacts -> slot definitions.

Spec text (seed 003, "Dividing System Resources"): a blanket ``25%`` or ``1/4``, or a list
``cpus=2, ram=50%, disk=1/4, swap=auto, 50%`` whose bare value is the default for every
resource not named. Standard resources go by their first letter (c, r/m, d, s/v); custom
resources and GPUs by their configured name, which wins over the letter rule (``cogs``
is not Cpus when a ``Cogs`` resource exists). A constraint follows a colon:
``GPUs = 2 : Capability >= 8.0`` or ``GPUs = 1 : "GPU-6a96bd13"``; the ``@=slot``
multi-line form puts one entry per line. ``auto`` shares out what explicit entries leave.
A layout that cannot be built raises ConfigError naming the slot type and resource.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from execd.classads import ClassAdError, parse_expr
from execd.errors import ConfigError
from execd.machine.facts import MachineFacts
from execd.slots.instances import InstanceMatcher

STANDARD = ("Cpus", "Memory", "Disk", "Swap")
_LETTER = {"c": "Cpus", "r": "Memory", "m": "Memory", "d": "Disk", "s": "Swap", "v": "Swap"}
_FRACTION = re.compile(r"^(\d+(?:\.\d*)?)\s*/\s*(\d+(?:\.\d*)?)$")
EPSILON = 1e-9


@dataclass(frozen=True)
class SlotTypeInput:
    """One slot type as configured (raw text supplied by the caller)."""

    type_id: int  # N of SLOT_TYPE_<N>; 0 for the plain NUM_SLOTS slots
    spec: str  # SLOT_TYPE_<N>; "" means auto for everything
    count: int | None  # NUM_SLOTS_TYPE_<N>; None: one per CPU
    partitionable: bool = False  # SLOT_TYPE_<N>_PARTITIONABLE


@dataclass(frozen=True)
class Share:
    kind: str  # "auto", "fraction" or "absolute"
    value: float = 0.0
    constraint: str | None = None


@dataclass(frozen=True)
class Assigned:
    """A custom resource given to a slot: an amount, and the instance ids if it has any."""

    amount: float
    ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlotDefinition:
    slot_id: int
    type_id: int
    partitionable: bool
    cpus: float
    memory_mb: int
    disk_fraction: float  # disk and swap change over time: slots own a fraction
    swap_fraction: float
    custom: dict[str, Assigned] = field(default_factory=dict)  # includes "GPUs"

    @property
    def name(self) -> str:
        return f"slot{self.slot_id}"


@dataclass(frozen=True)
class _Instances:
    ids: tuple[str, ...]
    props: dict[str, dict[str, object]]


def _resources(facts: MachineFacts) -> dict[str, tuple[float, _Instances | None]]:
    """Every resource a slot type may name: name -> (total, instances or None)."""
    found: dict[str, tuple[float, _Instances | None]] = {
        "Cpus": (facts.total_cpus, None),
        "Memory": (float(facts.total_memory_mb), None),
        "Disk": (1.0, None),  # as fractions of the (changing) total
        "Swap": (1.0, None),
    }
    for res in facts.custom.values():
        gone = facts.offline.get(res.name, ())
        ids = tuple(i for i in res.instances if i not in gone)
        inst = _Instances(ids, {i: {"Id": i} for i in ids})
        found[res.name] = (res.count - len(gone), inst if res.instances else None)
    if "GPUs" in found or not facts.gpus_resource:  # counted GPUs (no ids), or none at all
        return found
    gone = facts.offline.get("GPUs", ())
    gpu_ids = tuple(g.id for g in facts.gpus if g.id not in gone)
    found["GPUs"] = (
        float(len(gpu_ids)),
        _Instances(gpu_ids, {g.id: {**g.properties, "Id": g.id} for g in facts.gpus}),
    )
    return found


def resolve_resource_name(word: str, known: Sequence[str], where: str) -> str:
    for name in known:
        if name.lower() == word.lower() and name not in STANDARD:
            return name
    if word and word[0].lower() in _LETTER:
        return _LETTER[word[0].lower()]
    raise ConfigError(
        f"{where}: unknown resource {word!r} (known: {', '.join(sorted(known))})"
    )


def parse_share(text: str, where: str) -> Share:
    text = text.strip()
    if text.lower() == "auto":
        return Share("auto")
    try:
        if text.endswith("%"):
            value = float(text[:-1]) / 100
            kind = "fraction"
        elif m := _FRACTION.match(text):
            value = float(m.group(1)) / float(m.group(2))
            kind = "fraction"
        else:
            value = float(text)
            kind = "absolute"
    except (ValueError, ZeroDivisionError):
        raise ConfigError(
            f"{where}: {text!r} is not a fraction, percentage, number or auto"
        ) from None
    if not value >= 0 or math.isinf(value):
        raise ConfigError(f"{where}: {text!r} must be a non-negative amount")
    if kind == "fraction" and value > 1 + EPSILON:
        raise ConfigError(f"{where}: {text!r} is more than 100%")
    return Share(kind, value)


def _entries(spec: str) -> list[str]:
    entries: list[str] = []
    for raw in spec.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        entries.extend([line] if ":" in line else [e for e in line.split(",")])
    return [e.strip() for e in entries if e.strip()]


def parse_slot_type(
    type_id: int, spec: str, known: Sequence[str]
) -> tuple[dict[str, Share], Share]:
    """Named shares and the blanket default for one SLOT_TYPE_<N> value."""
    where = f"SLOT_TYPE_{type_id}"
    shares: dict[str, Share] = {}
    blanket = Share("auto")
    for entry in _entries(spec):
        body, colon, constraint = entry.partition(":")
        name, eq, amount = body.partition("=")
        if not eq:
            if colon:
                raise ConfigError(f"{where}: a constraint needs a resource name: {entry!r}")
            blanket = parse_share(name, f"{where} default share")
            continue
        resource = resolve_resource_name(name.strip(), known, where)
        share = parse_share(amount, f"{where}, {resource}")
        if colon:
            if not constraint.strip():
                raise ConfigError(f"{where}, {resource}: empty constraint after ':'")
            try:
                parse_expr(constraint)
            except ClassAdError as exc:
                raise ConfigError(f"{where}, {resource}: bad constraint: {exc}") from None
            share = Share(share.kind, share.value, constraint.strip())
        shares[resource] = share
    return shares, blanket


def _where(type_id: int) -> str:
    return f"SLOT_TYPE_{type_id}" if type_id else "NUM_SLOTS"


def _amount(resource: str, share: Share, total: float, facts: MachineFacts) -> float:
    if share.kind == "fraction":
        return share.value * total
    if resource == "Disk":  # an absolute disk or swap amount is KB of today's total
        return share.value / facts.total_disk_kb if facts.total_disk_kb else 1.0
    if resource == "Swap":
        return share.value / facts.total_vm_kb if facts.total_vm_kb else 0.0
    return share.value


def _whole(resource: str, value: float) -> float:
    """Cpus, Memory and counted resources come in whole units; disk/swap stay fractions."""
    if resource in ("Disk", "Swap"):
        return value
    return float(math.floor(value + EPSILON))


def build_layout(types: Sequence[SlotTypeInput], facts: MachineFacts) -> list[SlotDefinition]:
    resources = _resources(facts)
    known = list(resources)
    slots: list[tuple[SlotTypeInput, dict[str, Share], Share]] = []
    for t in sorted(types, key=lambda t: t.type_id):
        count = max(1, int(facts.total_cpus)) if t.count is None else t.count
        if count < 0:
            name = f"NUM_SLOTS_TYPE_{t.type_id}" if t.type_id else "NUM_SLOTS"
            raise ConfigError(f"{name} = {count} cannot be negative")
        shares, blanket = parse_slot_type(t.type_id, t.spec, known)
        slots.extend((t, shares, blanket) for _ in range(count))
    if not slots:
        raise ConfigError("the slot layout has no slots (every NUM_SLOTS_TYPE_<N> is 0)")

    amounts: list[dict[str, float]] = [{} for _ in slots]
    for resource, (total, _inst) in resources.items():
        autos: list[int] = []
        used = 0.0
        for i, (t, shares, blanket) in enumerate(slots):
            share = shares.get(resource, blanket)
            if share.kind == "auto":
                autos.append(i)
                continue
            amount = _whole(resource, _amount(resource, share, total, facts))
            used += amount
            if used > total * (1 + EPSILON) + EPSILON:
                shown = f"{used:.0%} of it" if resource in ("Disk", "Swap") else (
                    f"{used:g} of {total:g}")
                raise ConfigError(
                    f"{_where(t.type_id)}: {resource}: the slots ask for {shown}, "
                    f"more than the machine has"
                )
            amounts[i][resource] = amount
        each = _whole(resource, (total - used) / len(autos)) if autos else 0.0
        for i in autos:
            amounts[i][resource] = each

    for (t, _shares, _blanket), given in zip(slots, amounts, strict=True):
        if given["Cpus"] < 1 - EPSILON and not (t.partitionable and facts.total_cpus < 1):
            raise ConfigError(
                f"{_where(t.type_id)}: Cpus: a slot would get {given['Cpus']:g} CPUs "
                f"(the machine has {facts.total_cpus:g} CPUs for {len(slots)} slots)"
            )

    assigned = _assign_instances(slots, amounts, resources)
    definitions = []
    for slot_id, ((t, _s, _b), given) in enumerate(zip(slots, amounts, strict=True), start=1):
        custom = {
            name: Assigned(given[name], assigned.get((slot_id - 1, name), ()))
            for name in resources
            if name not in STANDARD
        }
        definitions.append(
            SlotDefinition(
                slot_id=slot_id,
                type_id=t.type_id,
                partitionable=t.partitionable,
                cpus=given["Cpus"],
                memory_mb=int(given["Memory"]),
                disk_fraction=given["Disk"],
                swap_fraction=given["Swap"],
                custom=custom,
            )
        )
    return definitions


def _assign_instances(
    slots: Sequence[tuple[SlotTypeInput, dict[str, Share], Share]],
    amounts: Sequence[dict[str, float]],
    resources: dict[str, tuple[float, _Instances | None]],
) -> dict[tuple[int, str], tuple[str, ...]]:
    """Give instance resources their ids: constrained slots choose first."""
    result: dict[tuple[int, str], tuple[str, ...]] = {}
    for resource, (_total, inst) in resources.items():
        if inst is None:
            continue
        matcher = InstanceMatcher(inst.props)
        free = list(inst.ids)
        order = sorted(
            range(len(slots)),
            key=lambda i: (slots[i][1].get(resource, slots[i][2]).constraint is None, i),
        )
        for i in order:
            t, shares, blanket = slots[i]
            want = amounts[i][resource]
            if want != int(want):
                raise ConfigError(
                    f"{_where(t.type_id)}: {resource}: {want:g} is not a whole number"
                )
            constraint = shares.get(resource, blanket).constraint
            chosen = matcher.pick(constraint, free, int(want))
            if chosen is None:
                raise ConfigError(
                    f"{_where(t.type_id)}: {resource}: cannot find {int(want)} of {resource}"
                    + (f" matching {constraint}" if constraint else "")
                    + f" among the unassigned ids {', '.join(free) or '(none)'}"
                )
            for c in chosen:
                free.remove(c)
            result[(i, resource)] = tuple(chosen)
    return result


def default_slot_types(num_slots: int | None = None,
                       partitionable: bool = True) -> list[SlotTypeInput]:  # fmt: skip
    """HTCondor 25 without SLOT_TYPE_<N>: NUM_SLOTS slots of the special type 0, each an
    even share of the machine, partitionable unless SLOT_TYPE_0_PARTITIONABLE is false.
    NUM_SLOTS defaults to one partitionable slot, or to one static slot per CPU."""
    count = num_slots if num_slots is not None or not partitionable else 1
    return [SlotTypeInput(type_id=0, spec="", count=count, partitionable=partitionable)]
