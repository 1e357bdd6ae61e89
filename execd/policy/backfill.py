"""Backfill (seed 003 "Backfill State"): one backfill client per daemon, shared by slots.

The first slot to reach Backfill/Idle makes the engine emit StartBackfillClient; later
slots join the running client at once (26). A slot leaving Backfill goes through
Backfill/Killing (28): if other slots still use the client it is released at once (29);
the last one out emits KillBackfillClient and waits for the client to exit (29), then
goes where the cause of leaving says: Owner (30), Claimed (31) or Matched (32). A client
that exits on its own sends its slots to Backfill/Idle (27), and the next pass respawns it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd.policy import actions as act
from execd.policy.preempting import drop_preempting_claim, take_slot
from execd.policy.slot import Now, Slot
from execd.policy.states import Activity, State

if TYPE_CHECKING:
    from execd.policy.engine import PolicyEngine

S, A = State, Activity
Actions = list[act.Action]

STOPPED, RUNNING, KILLING = "stopped", "running", "killing"


def evaluate_backfill(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    """The periodic pass for a slot in Backfill."""
    if slot.activity == A.IDLE:
        if slot.backfill_leave_to is not None:
            leave_backfill_idle(engine, slot, now, out)
        elif engine.backfill_client != KILLING:  # a dying client is waited for, then respawned
            if engine.backfill_client == STOPPED:
                engine.backfill_client = RUNNING
                out.append(act.StartBackfillClient())
            slot.backfill_running = True
            engine._move(slot, "backfill_spawned", now, out)
        return
    if slot.activity == A.BUSY:
        my = engine.machine_ad(slot, now)
        if engine._true(slot, "EVICT_BACKFILL", my, None, out) or \
                engine._true(slot, "IS_OWNER", my, None, out):
            slot.backfill_leave_to = "owner"
            release_slot(engine, slot, now, out)


def leave_backfill(engine: PolicyEngine, slot: Slot, now: Now) -> Actions:
    """Match, claim, vacate, drain or shutdown while in Backfill (backfill_leave_to set)."""
    out: Actions = []
    if slot.activity == A.BUSY:
        release_slot(engine, slot, now, out)
    elif slot.activity == A.IDLE:
        leave_backfill_idle(engine, slot, now, out)
    return out  # Backfill/Killing: the client's exit moves the slot on


def release_slot(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    """Backfill/Busy -> Backfill/Killing (28); the last user kills the shared client."""
    slot.backfill_running = False
    engine._move(slot, "evict_backfill", now, out)
    if any(s.backfill_running for s in engine.slots.values()):
        engine._move(slot, "backfill_slot_released", now, out)
        leave_backfill_idle(engine, slot, now, out)
    elif engine.backfill_client == RUNNING:
        engine.backfill_client = KILLING
        out.append(act.KillBackfillClient())


def client_exited(engine: PolicyEngine, now: Now) -> Actions:
    """The backfill client is gone: killed (29) or on its own (27, respawned)."""
    out: Actions = []
    engine.backfill_client = STOPPED
    for slot in list(engine.slots.values()):
        if slot.state != S.BACKFILL:
            continue
        if slot.activity == A.KILLING:
            engine._move(slot, "backfill_client_exited", now, out)
            leave_backfill_idle(engine, slot, now, out)
        elif slot.activity == A.BUSY:
            slot.backfill_running = False
            engine._move(slot, "backfill_client_exited", now, out)
    return out  # the engine then evaluates these slots (respawning the client if wanted)


def leave_backfill_idle(engine: PolicyEngine, slot: Slot, now: Now, out: Actions) -> None:
    """Backfill/Idle after the client is gone: 30 (Owner), 31 (Claimed), 32 (Matched)."""
    where = slot.backfill_leave_to
    slot.backfill_leave_to = None
    if where == "claimed" and slot.preempting_claim is not None:
        take_slot(slot, now, out)
        engine._move(slot, "backfill_to_claimed", now, out)
    elif where == "matched":
        engine._move(slot, "backfill_to_matched", now, out)
    elif where is not None:
        drop_preempting_claim(slot, "backfill ended for the owner", out)
        engine._move(slot, "backfill_to_owner", now, out)
