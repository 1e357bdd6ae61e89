"""Actions the engine returns; the daemon carries them out. Small and frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SpawnStarter:
    slot: str
    claim: str  # claim's public id, never the secret


@dataclass(frozen=True)
class Suspend:
    slot: str


@dataclass(frozen=True)
class Continue:
    slot: str


@dataclass(frozen=True)
class SoftKill:
    slot: str


@dataclass(frozen=True)
class HardKill:
    slot: str


@dataclass(frozen=True)
class KillStarterFamily:
    """KILLING_TIMEOUT ran out: SIGKILL the starter and everything under it."""

    slot: str


@dataclass(frozen=True)
class HoldJob:
    """WANT_HOLD was true when the job was evicted: put it on hold, not back in the queue."""

    slot: str
    reason: str
    subcode: int


@dataclass(frozen=True)
class PublishAd:
    slot: str


@dataclass(frozen=True)
class NotifyClaimHolder:
    slot: str
    claim: str
    reason: str


@dataclass(frozen=True)
class ClaimTookSlot:
    """A preempting claim became the slot's claim (23, 24; 31 from Backfill): its lease
    starts now, as condor_startd's beginClaim starts a claim's ClaimLease timer."""

    slot: str
    claim: str  # claim's public id, never the secret


@dataclass(frozen=True)
class StartBackfillClient:
    """Spawn the daemon's one backfill client (BACKFILL_SYSTEM); all backfill slots share it."""


@dataclass(frozen=True)
class KillBackfillClient:
    """Kill the backfill client and everything it started; the last backfill slot left."""


@dataclass(frozen=True)
class RunBenchmarks:
    """RUNBENCHMARKS moved the slot to Unclaimed/Benchmarking (3): run them, then report
    with PolicyEngine.benchmarks_done (4)."""

    slot: str


@dataclass(frozen=True)
class DeleteDynamicSlot:
    slot: str


@dataclass(frozen=True)
class LogEvent:
    event: str
    fields: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.event, tuple(sorted((k, str(v)) for k, v in self.fields.items()))))


Action = (
    SpawnStarter | HoldJob | Suspend | Continue | SoftKill | HardKill | KillStarterFamily
    | PublishAd | NotifyClaimHolder | ClaimTookSlot | StartBackfillClient | KillBackfillClient
    | RunBenchmarks | DeleteDynamicSlot | LogEvent
)
