"""Slot states and activities (seed 000, 3.5.5-3.5.6) and which pairs exist."""

from __future__ import annotations

from enum import StrEnum


class State(StrEnum):
    OWNER = "Owner"
    UNCLAIMED = "Unclaimed"
    MATCHED = "Matched"
    CLAIMED = "Claimed"
    PREEMPTING = "Preempting"
    BACKFILL = "Backfill"
    DRAINED = "Drained"


class Activity(StrEnum):
    IDLE = "Idle"
    BENCHMARKING = "Benchmarking"
    BUSY = "Busy"
    SUSPENDED = "Suspended"
    RETIRING = "Retiring"
    VACATING = "Vacating"
    KILLING = "Killing"
    CLEANING = "Cleaning"  # HTCondor 25: the starter cleans up after a job's normal end


S, A = State, Activity

# Every (state, activity) a slot may be in; anything else is a bug in the engine.
VALID_PAIRS: frozenset[tuple[State, Activity]] = frozenset(
    {
        (S.OWNER, A.IDLE),
        (S.UNCLAIMED, A.IDLE),
        (S.UNCLAIMED, A.BENCHMARKING),
        (S.MATCHED, A.IDLE),
        (S.CLAIMED, A.IDLE),
        (S.CLAIMED, A.BUSY),
        (S.CLAIMED, A.SUSPENDED),
        (S.CLAIMED, A.RETIRING),
        (S.CLAIMED, A.CLEANING),
        (S.PREEMPTING, A.VACATING),
        (S.PREEMPTING, A.KILLING),
        (S.BACKFILL, A.IDLE),
        (S.BACKFILL, A.BUSY),
        (S.BACKFILL, A.KILLING),
        (S.DRAINED, A.RETIRING),
        (S.DRAINED, A.IDLE),
    }
)


def label(state: State, activity: Activity) -> str:
    return f"{state.value}/{activity.value}"
