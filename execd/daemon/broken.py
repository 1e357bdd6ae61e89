"""Broken slots, kept across restarts for as long as what broke them is there.

A slot whose job left processes that could not be killed is marked broken
(SlotBrokenReason, on the d-slot and on its partitionable parent). As HTCondor's
CONTINUE_TO_ADVERTISE_BROKEN_DYNAMIC_SLOTS does, a broken d-slot stays advertised and its
resources stay out of the partitionable slot for as long as the daemon runs. Those
processes outlive the daemon, so the mark does too: each mark is written to the store
with the d-slot's carved resources, and a new daemon puts the marks back and takes the
resources out of the partitionable slot again — unless the slot's cgroup no longer
holds a process (they died at last, or the node rebooted). Such a mark is cleared: as
condor_startd's marks end with the daemon that made them, a restart (`execd restart`)
is how an admin clears a slot once its leftovers are gone, and only then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd import log
from execd.cgroups.tree import JobCgroup
from execd.daemon.store import StoreError, carved_json, dynamic_slot
from execd.errors import CgroupError, ResourceError

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


def _still_held(jobs: JobManager, slot: str) -> bool:
    """Does the slot's cgroup still hold a process? (Yes where it cannot be looked at.)"""
    tree = jobs.tree
    if tree is None:
        return True
    cgroup = JobCgroup(tree.fs, tree.base / f"{slot}.slice", frozenset())
    try:
        if cgroup.populated():
            return True
        cgroup.destroy()  # empty: what is left of it goes
    except CgroupError as exc:
        logger.error("broken_slot_not_checked", slot=slot, error=str(exc))
        return True
    return False


def _clear(jobs: JobManager, slot: str, reason: str) -> None:
    jobs.store.remove_broken(slot)
    logger.warning("broken_slot_cleared", slot=slot, reason=reason,
                   why="its cgroup holds no process any more")


def restore_broken(jobs: JobManager) -> int:
    """Put the stored marks back; a broken d-slot whose claim was not restored takes its
    resources out of its partitionable slot again. A mark whose slot's cgroup is empty
    now is cleared instead, and a partitionable slot's mark with the last of its
    d-slots'. Returns how many marks came back."""
    node = jobs.daemon.node
    restored = 0
    marks = jobs.store.broken()
    pslots = {f"slot{n}" for n in node.slots.partitionable}
    for slot, reason, carved in marks:
        if slot in pslots:
            continue  # a partitionable slot's mark stands for its d-slots': after them
        if not _still_held(jobs, slot):
            _clear(jobs, slot, reason)
            continue
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
    for slot, reason, _carved in marks:
        if slot not in pslots:
            continue
        if not any(d.startswith(f"{slot}_") for d in node.broken):
            _clear(jobs, slot, reason)
            continue
        node.broken[slot] = reason
        logger.warning("broken_slot_restored", slot=slot, reason=reason)
        restored += 1
    return restored
