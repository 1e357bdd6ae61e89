"""The startd's own event counters, as condor_startd 25.x keeps them (ResMgr.h's
StartdStats) and publishes them on every slot ad: each a running total since the
daemon started and `Recent<Name>` over the last 20 minutes.

| attribute | counts |
|---|---|
| ClaimRequests | REQUEST_CLAIMs that named a claim id this startd offers |
| JobPreemptions | REQUEST_CLAIMs that preempted a claim (either kind below) |
| JobRankPreemptions | ... for the slot's RANK of the new job |
| JobUserPrioPreemptions | ... for the submitter's priority (an equal RANK) |
| ActivationRequests | ACTIVATE_CLAIMs that arrived on a claimed slot |
| JobStarts | activations that started a job (condor_startd's Claim::beginActivation) |
| NewDSlotNotMatch | dynamic slots carved for a claim whose START then refused the job |

The "recent" window is condor_startd's fixed one (not STATISTICS_WINDOW_SECONDS, which
only daemon core's own statistics read): five buckets of 4 minutes. An event goes into
the newest bucket; the buckets move on, by whole quanta of time since the last move,
only when the attributes are published (condor_startd's publish, then Tick), so an event
leaves `Recent<Name>` at the fifth quantum boundary after it: between 16 and 20 minutes.

Pure: time is an argument (wall seconds, as HTCondor's generic_stats_Tick takes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

COUNTERS = (
    "JobPreemptions", "JobRankPreemptions", "JobUserPrioPreemptions", "JobStarts",
    "ClaimRequests", "ActivationRequests", "NewDSlotNotMatch",
)  # fmt: skip
RECENT_WINDOW_S = 20 * 60
RECENT_QUANTUM_S = 4 * 60
BUCKETS = RECENT_WINDOW_S // RECENT_QUANTUM_S


@dataclass
class RecentCounter:
    """A total and the counts of the last BUCKETS quanta (the newest last)."""

    total: int = 0
    buckets: deque[int] = field(default_factory=lambda: deque([0], maxlen=BUCKETS))

    def add(self, count: int = 1) -> None:
        self.total += count
        self.buckets[-1] += count

    def advance(self, quanta: int) -> None:
        """`quanta` quanta passed: the oldest buckets fall out of the window."""
        for _ in range(min(quanta, BUCKETS)):
            self.buckets.append(0)

    @property
    def recent(self) -> int:
        return sum(self.buckets)


MIB = 1024 * 1024


@dataclass
class TransferBytes:
    """The bytes the jobs' file transfers moved, summed at each job's end (condor_startd
    sums its starters' final BytesRecvd/BytesSent) and published in its daemon ad only:
    input is what the starter received, output what it sent; the average is per job,
    in whole bytes as HTCondor's integer probe divides."""

    jobs: int = 0
    received: int = 0
    sent: int = 0

    def add(self, received: int, sent: int) -> None:
        self.jobs += 1
        self.received += received
        self.sent += sent

    def attributes(self) -> dict[str, float]:
        def average(total: int) -> float:
            return (total // self.jobs if self.jobs else total) / MIB

        return {"AvgTransferInputMB": average(self.received),
                "TotalTransferInputMB": self.received / MIB,
                "AvgTransferOutputMB": average(self.sent),
                "TotalTransferOutputMB": self.sent / MIB}  # fmt: skip


class StartdStats:
    """The daemon's counters; count() as events happen, publish(now) for an ad."""

    def __init__(self) -> None:
        self.counters = {name: RecentCounter() for name in COUNTERS}
        self.transfers = TransferBytes()
        self._last_update: int | None = None  # generic_stats_Tick's LastUpdateTime
        self._tick_time = 0  # ... and RecentTickTime: where the current quantum began
        self.events = 0  # every count() adds one: a cached publish() is stale when it moved

    def count(self, name: str, count: int = 1) -> None:
        if name not in self.counters:
            raise KeyError(f"no startd counter named {name!r}")
        self.counters[name].add(count)
        self.events += 1

    def publish(self, now: float) -> dict[str, int]:
        """`<Name>` and `Recent<Name>` for every counter, then the window moves on to
        `now` (condor_startd publishes, then ticks)."""
        values: dict[str, int] = {}
        for name, counter in self.counters.items():
            values[name] = counter.total
            values[f"Recent{name}"] = counter.recent
        self._tick(int(now))
        return values

    def _tick(self, now: int) -> None:
        if self._last_update is None:  # the first tick only starts the clock
            self._last_update = self._tick_time = now
            return
        if now == self._last_update:
            return
        self._last_update = now
        delta = now - self._tick_time
        if delta < RECENT_QUANTUM_S:
            return  # (a clock set back lands here too: nothing moves)
        quanta = delta // RECENT_QUANTUM_S
        self._tick_time = now - delta % RECENT_QUANTUM_S
        for counter in self.counters.values():
            counter.advance(quanta)
