"""Load averages: the machine's total and its split over slots (seed 000, 3.5.10).

Each slot first gets the load its own jobs generate (CondorLoadAvg: the CPU its job's
cgroup used per wall second over the last minute, JobLoadMeter). What is left of the
total is owner load: handed out at most 1.0 per slot, to slots in the Owner state first,
then to the others in order; if slots run out first, the remainder goes round in
whole units, so a slot's LoadAvg can exceed 1.0 only then.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
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


# HTCondor averages a slot's job CPU usage over the last minute (its "CondorLoadAvg").
CONDOR_LOAD_WINDOW_S = 60.0


class JobLoadMeter:
    """Each slot's job load: CPU seconds its job cgroup used per wall second, averaged
    over the last CONDOR_LOAD_WINDOW_S (from cpu.stat's usage_usec, which a cgroup v2
    has even without controllers). A slot without a running job has load 0."""

    def __init__(self, window_s: float = CONDOR_LOAD_WINDOW_S) -> None:
        self.window_s = window_s
        self._samples: dict[str, deque[tuple[float, int]]] = {}

    def sample(self, now: float, usage_usec: Mapping[str, int]) -> None:
        """Record each running job's cumulative CPU use; forget slots without a job."""
        for slot in list(self._samples):
            if slot not in usage_usec:
                del self._samples[slot]
        for slot, usec in usage_usec.items():
            samples = self._samples.setdefault(slot, deque())
            if samples and (usec < samples[-1][1] or now <= samples[-1][0]):
                samples.clear()  # a new job (counter restarted) or a clock step
            samples.append((now, usec))
            while len(samples) > 2 and now - samples[1][0] >= self.window_s:
                samples.popleft()

    def loads(self) -> dict[str, float]:
        """Slot name -> CondorLoadAvg (0.0 until a job has two samples)."""
        out: dict[str, float] = {}
        for slot, samples in self._samples.items():
            (t0, u0), (t1, u1) = samples[0], samples[-1]
            out[slot] = round((u1 - u0) / 1e6 / (t1 - t0), 3) if t1 > t0 else 0.0
        return out
