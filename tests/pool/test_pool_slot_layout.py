"""With no SLOT_TYPE_<N> configured, execd lays out its slots as condor_startd 25.x
does: slots of the special type 0, each an even share of the machine, partitionable
unless SLOT_TYPE_0_PARTITIONABLE is false; NUM_SLOTS of them (by default one when
partitionable, one per CPU when not). Compared in the pool tier with condor_startd on
the same NUM_CPUS and MEMORY: each slot's name, type, SlotTypeID, CPUs and memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S
from test_pool_jobs import on_both
from test_pool_machine_attrs import startd_off, startd_on

# (config, how many slots it makes on a 2-CPU node)
LAYOUTS = {
    "default": ("", 1),
    "num-slots": ("NUM_SLOTS = 2\n", 2),
    "not-partitionable": ("SLOT_TYPE_0_PARTITIONABLE = false\n", 2),
    "num-slots-not-partitionable": ("NUM_SLOTS = 1\nSLOT_TYPE_0_PARTITIONABLE = false\n", 1),
}  # fmt: skip


def slots(pool: harness.Pool, count: int) -> list[tuple[Any, ...]]:
    """(name, SlotType, SlotTypeID, Cpus, Memory) of each slot, once `count` are listed."""
    def listed() -> list[tuple[Any, ...]] | None:
        ads = pool.status("-slots")
        return sorted((ad["Name"].split("@")[0], ad["SlotType"], ad["SlotTypeID"], ad["Cpus"],
                       ad["Memory"]) for ad in ads) if len(ads) == count else None  # fmt: skip

    found: list[tuple[Any, ...]] = harness.wait_for(f"{count} slots", listed, WAIT_S, 0.2)
    return found


@contextlib.contextmanager
def startd_with(pool: harness.Pool, text: str) -> Iterator[None]:
    """condor_startd started anew on NUM_CPUS = 2, MEMORY = 1024 and `text`."""
    config = pool.host_path("/etc/condor/config.d/99-execd-slot-layout.conf")
    startd_off(pool)
    config.write_text("NUM_CPUS = 2\nMEMORY = 1024\n" + text)
    try:
        pool.tool("condor_on", "-startd").check()
        yield
    finally:
        startd_off(pool)
        config.unlink()
        startd_on(pool)


@pytest.mark.parametrize("name", LAYOUTS)
def test_slots_without_slot_types_as_on_condor_startd(running_pool: harness.RunningPool,
                                                      name: str) -> None:  # fmt: skip
    text, count = LAYOUTS[name]
    # NUM_SLOTS_TYPE_1 = 0 undoes the test daemon's `use FEATURE : PartitionableSlot`
    ours, theirs = on_both(running_pool, lambda pool: slots(pool, count),
                           "NUM_SLOTS_TYPE_1 = 0\n" + text,
                           lambda pool: startd_with(pool, text))  # fmt: skip
    assert ours == theirs
