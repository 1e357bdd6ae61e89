"""A partitionable slot and the dynamic slots carved from it.

Carving takes a ResourceRequest (execd.slots.requests); a request that does not fit
raises ResourceError naming the resource and leaves the slot as it was. Dynamic slots
are named ``slot<N>_<M>``; M is the lowest number not in use, so numbers freed by
deleted slots come back (HTCondor's startd hands out sub-ids the same way).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from execd.errors import ResourceError
from execd.slots.instances import InstanceMatcher
from execd.slots.layout import Assigned, SlotDefinition
from execd.slots.requests import ResourceRequest

EPSILON = 1e-9


@dataclass(frozen=True)
class DynamicSlot:
    parent_id: int
    sub_id: int
    cpus: float
    memory_mb: int
    disk_kb: int
    custom: dict[str, Assigned] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"slot{self.parent_id}_{self.sub_id}"


class PartitionableSlot:
    def __init__(
        self,
        definition: SlotDefinition,
        disk_kb: int,
        instance_props: Mapping[str, Mapping[str, object]] | None = None,
    ) -> None:
        if not definition.partitionable:
            raise ValueError(f"{definition.name} is not partitionable")
        self.definition = definition
        self.total_disk_kb = disk_kb
        self.free_cpus = float(definition.cpus)
        self.free_memory_mb = definition.memory_mb
        self.free_disk_kb = disk_kb
        self.free_amounts = {n: a.amount for n, a in definition.custom.items()}
        self.free_ids = {n: list(a.ids) for n, a in definition.custom.items() if a.ids}
        self._id_order = {
            n: {i: k for k, i in enumerate(a.ids)} for n, a in definition.custom.items()
        }
        self._freed_sub_ids: list[int] = []  # a heap: the lowest freed number is reused first
        self._next_new_sub_id = 1
        self.dynamic: dict[int, DynamicSlot] = {}
        self._matcher = InstanceMatcher(instance_props or {})

    @property
    def slot_id(self) -> int:
        return self.definition.slot_id

    @property
    def name(self) -> str:
        return self.definition.name

    def _next_sub_id(self) -> int:
        if self._freed_sub_ids:
            return heapq.heappop(self._freed_sub_ids)
        self._next_new_sub_id += 1
        return self._next_new_sub_id - 1

    def _check(self, resource: str, asked: float, free: float) -> None:
        if asked < 0:
            raise ResourceError(f"{self.name}: a request for {asked:g} {resource} is negative")
        if asked > free + EPSILON:
            raise ResourceError(
                f"{self.name}: the job asks for {asked:g} {resource}, "
                f"{free:g} {resource} {'is' if free == 1 else 'are'} left"
            )

    def carve(self, request: ResourceRequest) -> DynamicSlot:
        """A new dynamic slot for ``request``; ResourceError (nothing changed) if it cannot fit."""
        self._check("Cpus", request.cpus, self.free_cpus)
        self._check("Memory (MB)", request.memory_mb, self.free_memory_mb)
        self._check("Disk (KB)", request.disk_kb, self.free_disk_kb)
        chosen: dict[str, Assigned] = {}
        for name, asked in request.custom.items():
            if name not in self.free_amounts:
                if asked > 0:
                    raise ResourceError(f"{self.name}: the job asks for {asked:g} {name}, "
                                        f"a resource this slot does not have")
                continue
            self._check(name, asked, self.free_amounts[name])
            if name in self.free_ids:
                if asked != int(asked):
                    raise ResourceError(f"{self.name}: {name} come whole; {asked:g} was asked")
                constraint = request.constraints.get(name)
                ids = self._matcher.pick(constraint, self.free_ids[name], int(asked))
                if ids is None:
                    raise ResourceError(
                        f"{self.name}: no {int(asked)} free {name} match {constraint} "
                        f"(free: {', '.join(self.free_ids[name]) or 'none'})"
                    )
                chosen[name] = Assigned(asked, tuple(ids))
            else:
                chosen[name] = Assigned(asked)
        # everything fits: take it
        self.free_cpus -= request.cpus
        self.free_memory_mb -= request.memory_mb
        self.free_disk_kb -= request.disk_kb
        for name, got in chosen.items():
            self.free_amounts[name] -= got.amount
            for i in got.ids:
                self.free_ids[name].remove(i)
        for name in self.free_amounts:
            chosen.setdefault(name, Assigned(0.0))
        slot = DynamicSlot(
            parent_id=self.slot_id,
            sub_id=self._next_sub_id(),
            cpus=request.cpus,
            memory_mb=request.memory_mb,
            disk_kb=request.disk_kb,
            custom=chosen,
        )
        self.dynamic[slot.sub_id] = slot
        return slot

    def restore(self, dynamic: DynamicSlot) -> DynamicSlot:
        """Take again exactly what an earlier daemon carved for ``dynamic`` (after a restart)."""
        if dynamic.parent_id != self.slot_id or dynamic.sub_id in self.dynamic:
            raise ResourceError(f"{self.name}: cannot restore {dynamic.name}: it exists already")
        self._check("Cpus", dynamic.cpus, self.free_cpus)
        self._check("Memory (MB)", dynamic.memory_mb, self.free_memory_mb)
        self._check("Disk (KB)", dynamic.disk_kb, self.free_disk_kb)
        for name, got in dynamic.custom.items():
            self._check(name, got.amount, self.free_amounts.get(name, 0.0))
            if any(i not in self.free_ids.get(name, []) for i in got.ids):
                raise ResourceError(f"{self.name}: cannot restore {dynamic.name}: "
                                    f"{name} {', '.join(got.ids)} not all free")
        self.free_cpus -= dynamic.cpus
        self.free_memory_mb -= dynamic.memory_mb
        self.free_disk_kb -= dynamic.disk_kb
        for name, got in dynamic.custom.items():
            self.free_amounts[name] -= got.amount
            for i in got.ids:
                self.free_ids[name].remove(i)
        if dynamic.sub_id in self._freed_sub_ids:
            self._freed_sub_ids.remove(dynamic.sub_id)
            heapq.heapify(self._freed_sub_ids)
        elif dynamic.sub_id >= self._next_new_sub_id:
            for skipped in range(self._next_new_sub_id, dynamic.sub_id):
                heapq.heappush(self._freed_sub_ids, skipped)
            self._next_new_sub_id = dynamic.sub_id + 1
        self.dynamic[dynamic.sub_id] = dynamic
        return dynamic

    def release(self, sub_id: int) -> DynamicSlot:
        """Delete a dynamic slot; its resources return to this slot."""
        slot = self.dynamic.pop(sub_id, None)
        if slot is None:
            raise ResourceError(f"{self.name} has no dynamic slot {self.name}_{sub_id}")
        heapq.heappush(self._freed_sub_ids, sub_id)
        self.free_cpus += slot.cpus
        self.free_memory_mb += slot.memory_mb
        self.free_disk_kb += slot.disk_kb
        for name, got in slot.custom.items():
            self.free_amounts[name] += got.amount
            if got.ids:
                order = self._id_order[name]
                merged = [*self.free_ids[name], *got.ids]
                self.free_ids[name] = sorted(merged, key=order.__getitem__)
        return slot

    def remaining(self) -> dict[str, Assigned]:
        """Custom resources left, with their free ids."""
        return {
            n: Assigned(a, tuple(self.free_ids.get(n, ()))) for n, a in self.free_amounts.items()
        }
