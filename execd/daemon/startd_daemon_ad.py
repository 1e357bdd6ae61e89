"""The startd's daemon ad: one ad for the whole node besides its slot ads (pool mode).

condor_startd 23.2 and later sends the collector, with UPDATE_STARTD_AD, an ad of
MyType "StartD" named after the node (STARTD_NAME, else its host name: the part of its
slot names after the @), without a private ad, and marks every slot ad
`HasStartDaemonAd = true`. The collector keeps it in its own table: `condor_status
-startd` lists one row per node from it (Name, Platform, Version, DetectedCpus/Memory/
GPUs, uptime; the totals read TotalSlots, TotalCpus, TotalMemory, TotalGPUs and
TotalInUse*/TotalBackfillInUse*), and a tool that locates a startd by name (condor_drain
NODE, condor_off -startd -name NODE, condor_config_val -startd -name NODE) finds its
MyAddress there first. Without one the collector makes one up from slot 1's ad, named
after that slot.

What it holds, as condor_startd's (ResMgr::publish_daemon_ad): the machine's attributes
(Arch, OpSys*, Detected*, Total*, MachineResources, the host's has_*/Cpu*/Utsname*),
the node-wide ones every slot ad carries too (address, version, domains, load totals,
clock, benchmarks, drain estimates, the startd's counters, self monitor, starter
abilities, hibernation, execute volume: `ExecuteVolumes`, a list; the values of
STARTD_ATTRS and SYSTEM_STARTD_ATTRS, which daemon core puts in every ad), and its own:
`TotalInUse<Res>` (resources of the dynamic slots and of claimed or preempting static
slots), `TotalBackfillInUse<Res>` and `ExcessBackfill<Res>` (0: execd has no backfill
slots). Nothing of one slot (state, policy, claimant, slot resources) goes in.

When: as condor_startd, at the first round and then every UPDATE_INTERVAL or after a
reconfig, not on every slot state change. On shutdown it is invalidated (TargetType
StartD, its Name and MyAddress) with the slot ads. ENABLE_STARTD_DAEMON_AD: true,
false (no daemon ad, no HasStartDaemonAd: the collector makes one up), auto (default:
sent unless the collector said in its handshake it is older than 23.2).

It also carries, as condor_startd's and no slot ad, the jobs' file-transfer bytes:
`Avg/TotalTransferInput/OutputMB` (execd.daemon.startd_stats.TransferBytes).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from execd.errors import ConfigError
from execd.slots.ads import machine_attributes
from execd.slots.from_config import daemon_ad_attrs
from execd.slots.layout import STANDARD
from execd.wire.advertiser import AdPairs, slot_name
from execd.wire.classad_codec import WireAd, from_values

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember

DAEMON_AD_TYPE = "StartD"
OLDEST_COLLECTOR = (23, 2, 0)  # the first collector with a StartD table
MODES = {"true": "true", "yes": "true", "1": "true", "false": "false", "no": "false",
         "0": "false", "auto": "auto"}  # fmt: skip
# Node-wide attributes every slot ad carries, copied from the first slot's ad.
FROM_SLOT = (
    "Machine", "MyAddress", "StartdIpAddr", "CondorVersion", "UidDomain", "FileSystemDomain",
    "MyCurrentTime", "TotalLoadAvg", "TotalCondorLoadAvg", "ClockDay", "ClockMin",
    "LastBenchmark", "Mips", "KFlops", "HasFileTransfer",
    "ExpectedMachineGracefulDrainingBadput", "ExpectedMachineGracefulDrainingCompletion",
    "ExpectedMachineQuickDrainingBadput", "ExpectedMachineQuickDrainingCompletion",
)  # fmt: skip
NOT_DAEMON = frozenset({"MyType", "TargetType", "Unhibernate", "ExecuteVolume"})
IN_USE_STATES = ('"Claimed"', '"Preempting"')
HAS_DAEMON_AD = from_values({"HasStartDaemonAd": True})


def daemon_ad_mode(text: str | None) -> str:
    """ENABLE_STARTD_DAEMON_AD as "true", "false" or "auto"; ConfigError otherwise."""
    mode = MODES.get((text or "auto").strip().lower())
    if mode is None:
        raise ConfigError(f"ENABLE_STARTD_DAEMON_AD {text!r} is not true, false or auto")
    return mode


def version_tuple(version: str) -> tuple[int, ...] | None:
    """(25, 14, 1) of "$CondorVersion: 25.14.1 2026-10-16 ... $" (None: not said)."""
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(n) for n in found.groups()) if found else None


def _number(text: str | None) -> float:
    try:
        return float(text) if text is not None else 0.0
    except ValueError:
        return 0.0


def resources_in_use(pairs: AdPairs) -> dict[str, float]:
    """TotalInUse<Res>: the dynamic slots' resources (whatever their state) and those of
    claimed or preempting static slots, as condor_startd sums them; the standard three
    always, any other machine resource once a slot counted has it (GPUs = 0 too)."""
    used = dict.fromkeys(("Cpus", "Memory", "Disk"), 0.0)
    for public, _ in pairs:
        dynamic = public.get("DynamicSlot") == "true"
        static = public.get("PartitionableSlot") != "true" and not dynamic
        if not dynamic and not (static and public.get("State") in IN_USE_STATES):
            continue
        for res in public.get("MachineResources", '""').strip('"').split():
            if res != "Swap":
                used[res] = used.get(res, 0.0) + _number(public.get(res))
    return used


def _bag(prefix: str, amounts: dict[str, float]) -> dict[str, float | int]:
    """A resource bag as condor_startd publishes one: Memory and Disk whole, the rest real."""
    return {f"{prefix}{res}": int(v) if res in ("Memory", "Disk") else float(v)
            for res, v in amounts.items()}  # fmt: skip


class StartdDaemonAd:
    """The daemon ad of one PoolMember: `for_round(pairs)` gives it when due (the
    advertiser's hook), `slot_attributes()` what every slot ad says of it."""

    def __init__(self, member: PoolMember) -> None:
        self.member = member
        self._sent_at: float | None = None  # monotonic time of the last one built
        self._sent_reconfig: float | None = None
        self._marks: tuple[tuple[object, str], WireAd] | None = None

    def mode(self) -> str:
        try:
            return daemon_ad_mode(self.member.daemon.settings.get_str("ENABLE_STARTD_DAEMON_AD"))
        except ConfigError:
            return "auto"  # refused at startup; a reload cannot bring it here unchecked

    def enabled(self) -> bool:
        mode = self.mode()
        if mode != "auto":
            return mode == "true"
        known = version_tuple(self.member.collector.version)
        return known is None or known >= OLDEST_COLLECTOR

    def slot_attributes(self) -> WireAd:
        """HasStartDaemonAd = true in every slot ad while the daemon ad is sent (decided
        once per configuration and collector version: every slot ad asks)."""
        key = (self.member.daemon.settings, self.member.collector.version)
        if self._marks is None or self._marks[0] != key:
            self._marks = (key, HAS_DAEMON_AD if self.enabled() else {})
        return self._marks[1]

    def _due(self, mono: float) -> bool:
        reconfigured = self.member.daemon.reconfigured
        if self._sent_at is not None and mono - self._sent_at < self.member.config.interval_s \
                and reconfigured == self._sent_reconfig:  # fmt: skip
            return False
        self._sent_at, self._sent_reconfig = mono, reconfigured
        return True

    def for_round(self, pairs: AdPairs) -> WireAd | None:
        """The daemon ad to send with this round's slot ads, or None (disabled, not due
        yet, or no slot to take the node's attributes from)."""
        if not pairs or not self.enabled() or not self._due(time.monotonic()):
            return None
        return self.build(pairs)

    def build(self, pairs: AdPairs) -> WireAd:
        first = pairs[0][0]
        facts = self.member.daemon.node.slots.facts
        names = (set(machine_attributes(facts)) | set(FROM_SLOT)
                 | set(daemon_ad_attrs(self.member.daemon.config))
                 | set(self.member.daemon_attrs.common(time.time()))) - NOT_DAEMON  # fmt: skip
        ad: WireAd = {name: first[name] for name in sorted(names) if name in first}
        node = slot_name(first).partition("@")[2] or str(facts.hostname)
        others = [r for r in first.get("MachineResources", '""').strip('"').split()
                  if r not in STANDARD]  # fmt: skip
        idle = dict.fromkeys(["Cpus", "Memory", "Disk", *others], 0.0)
        values: dict[str, object] = {
            "MyType": DAEMON_AD_TYPE, "Name": node,
            **_bag("TotalInUse", resources_in_use(pairs)),
            **_bag("TotalBackfillInUse", dict.fromkeys(("Cpus", "Memory", "Disk"), 0.0)),
            **_bag("ExcessBackfill", idle),
            **self.member.daemon.startd_stats.transfers.attributes(),
        }  # fmt: skip
        if "ExecuteVolume" in first:
            values["ExecuteVolumes"] = [first["ExecuteVolume"].strip('"')]
        ad.update(from_values(values))
        return ad
