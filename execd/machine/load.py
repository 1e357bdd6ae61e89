"""Load averages: the machine's total and its split over slots (seed 000, 3.5.10).

Each slot first gets the load its own jobs generate (CondorLoadAvg). What is left of the
total is owner load: handed out at most 1.0 per slot, to slots in the Owner state first,
then to the others in order; if slots run out first, the remainder goes round in
whole units, so a slot's LoadAvg can exceed 1.0 only then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from execd.machine.reader import HostReader


def read_total_load_avg(reader: HostReader) -> float:
    """The one-minute load average from /proc/loadavg (0.0 when unreadable)."""
    fields = (reader.read_text("/proc/loadavg") or "").split()
    try:
        return float(fields[0])
    except (IndexError, ValueError):
        return 0.0


@dataclass(frozen=True)
class SlotLoadInput:
    name: str
    condor_load: float  # load of the slot's own job processes
    in_owner_state: bool = False


def split_load(total_load: float, slots: Sequence[SlotLoadInput]) -> dict[str, float]:
    """Name -> LoadAvg for each slot."""
    loads = {s.name: max(0.0, s.condor_load) for s in slots}
    remaining = max(0.0, total_load - sum(loads.values()))
    order = [s for s in slots if s.in_owner_state] + [s for s in slots if not s.in_owner_state]
    for slot in order:
        if remaining <= 0:
            break
        give = min(remaining, max(0.0, 1.0 - loads[slot.name]))
        loads[slot.name] += give
        remaining -= give
    i = 0
    while remaining > 1e-9 and order:
        give = min(1.0, remaining)
        loads[order[i % len(order)].name] += give
        remaining -= give
        i += 1
    return {name: round(value, 6) for name, value in loads.items()}
