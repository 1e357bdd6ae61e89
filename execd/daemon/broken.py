"""Broken slots, kept across restarts.

A slot whose job left processes that could not be killed is marked broken
(SlotBrokenReason, on the d-slot and on its partitionable parent). As HTCondor's
CONTINUE_TO_ADVERTISE_BROKEN_DYNAMIC_SLOTS does, a broken d-slot stays advertised and its
resources stay out of the partitionable slot for as long as the node runs. Those
processes outlive the daemon, so the mark does too: each mark is written to the store
with the d-slot's carved resources, and a new daemon puts the marks back and takes the
resources out of the partitionable slot again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd import log
from execd.daemon.store import StoreError, carved_json, dynamic_slot
from execd.errors import ResourceError

if TYPE_CHECKING:
    from execd.daemon.jobs import JobManager

logger = log.get_logger("recovery")


def record_broken(jobs: JobManager, slot: str, reason: str) -> None:
    """Node.on_broken: store a new mark, with the d-slot's resources if it has any."""
    parent_id, _, sub = slot.removeprefix("slot").partition("_")
    pslot = jobs.daemon.node.slots.partitionable.get(int(parent_id)) \
        if parent_id.isdigit() else None
    carved = pslot.dynamic.get(int(sub)) if pslot is not None and sub.isdigit() else None
    try:
        jobs.store.set_broken(slot, reason, None if carved is None else carved_json(carved))
    except StoreError as exc:  # the mark holds in memory until the daemon stops
        logger.error("broken_slot_not_stored", slot=slot, error=str(exc))


def restore_broken(jobs: JobManager) -> int:
    """Put the stored marks back; a broken d-slot whose claim was not restored takes its
    resources out of its partitionable slot again. Returns how many marks came back."""
    node = jobs.daemon.node
    restored = 0
    for slot, reason, carved in jobs.store.broken():
        if carved is not None:
            try:
                dslot = dynamic_slot(carved)
                pslot = node.slots.partitionable.get(dslot.parent_id)
                if pslot is None:
                    raise ResourceError(f"no partitionable slot {dslot.parent_id} any more")
                if dslot.sub_id not in pslot.dynamic:  # else restored with its claim
                    pslot.restore(dslot)
            except (ResourceError, ValueError, KeyError, TypeError) as exc:
                logger.error("broken_slot_not_restored", slot=slot, error=str(exc))
                jobs.store.remove_broken(slot)
                continue
        node.broken[slot] = reason  # not through mark_broken: it is stored already
        logger.warning("broken_slot_restored", slot=slot, reason=reason)
        restored += 1
    return restored
