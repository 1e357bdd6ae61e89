"""The startd daemon ad's pure parts: ENABLE_STARTD_DAEMON_AD, the collector's version
and TotalInUse<Res> as condor_startd sums it (ResMgr::compute_resource_conflicts).
Against the real collector and condor_startd: tests/pool/test_pool_startd_daemon_ad.py."""

from __future__ import annotations

import pytest

from execd.daemon.startd_daemon_ad import daemon_ad_mode, resources_in_use, version_tuple
from execd.errors import ConfigError
from execd.wire.classad_codec import WireAd, from_values

RESOURCES = "Cpus Memory Disk Swap GPUs"


def slot(kind: str, state: str, cpus: float, memory: int, gpus: int = 0) -> WireAd:
    values: dict[str, object] = {"State": state, "Cpus": cpus, "Memory": memory, "Disk": 100,
                                 "GPUs": gpus, "MachineResources": RESOURCES}  # fmt: skip
    if kind == "p":
        values["PartitionableSlot"] = True
    elif kind == "d":
        values["DynamicSlot"] = True
    return from_values(values)


def test_mode_words() -> None:
    assert [daemon_ad_mode(w) for w in (None, "AUTO", "True", "no", "1")] == \
        ["auto", "auto", "true", "false", "true"]
    with pytest.raises(ConfigError, match="ENABLE_STARTD_DAEMON_AD 'maybe'"):
        daemon_ad_mode("maybe")


def test_collector_version_from_its_condor_version() -> None:
    assert version_tuple("$CondorVersion: 25.14.1 2026-10-16 PackageID: 25.14.1+dfsg-1 $") \
        == (25, 14, 1)
    assert version_tuple("") is None


def test_idle_node_has_nothing_in_use_and_only_the_standard_three() -> None:
    pairs = [(slot("p", "Unclaimed", 2, 1024, 1), {}), (slot("s", "Unclaimed", 1, 512), {})]
    assert resources_in_use(pairs) == {"Cpus": 0.0, "Memory": 0.0, "Disk": 0.0}


def test_dynamic_slots_and_claimed_static_slots_count() -> None:
    pairs = [(slot("p", "Unclaimed", 1, 512, 1), {}),
             (slot("d", "Claimed", 1, 128), {}),  # GPUs = 0: still published
             (slot("d", "Owner", 0.5, 128, 1), {}),  # a d-slot counts in any state
             (slot("s", "Preempting", 1, 256), {}),
             (slot("s", "Unclaimed", 4, 4096), {}),
             (slot("s", "Matched", 4, 4096), {})]  # fmt: skip
    assert resources_in_use(pairs) == {"Cpus": 2.5, "Memory": 512.0, "Disk": 300.0, "GPUs": 1.0}
