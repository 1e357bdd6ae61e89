"""The daemon-level attributes condor_startd 25.x publishes on every slot ad, for the
pool's collector and its monitoring: what the node's startd is, not what one slot is.

- the startd's counters (execd.daemon.startd_stats) and `TotalSlots` (slots it has);
- daemon core's self monitor and duty cycle (execd.daemon.self_monitor);
- the starter's abilities: condor_startd copies every `Has*` attribute of its starter's
  `condor_starter -classad` into each slot ad and lists their names in
  `StarterAbilityList`. execd's starter advertises what it really does (docs/pool.md):
  file transfer, the shadow's reconnect, input files the shadow renames
  (`transfer_input_files = a -> b`, a name with a directory arrives as that path),
  the URL methods of the node's file transfer plugins (`HasFileTransferPluginMethods`,
  left out without plugins, as condor_starter; execd/wire/transfer_plugins.py), the
  job's own plugins (`HasJobTransferPlugins`, with ENABLE_URL_TRANSFERS and a cgroup
  tree, as they run only in a cgroup) and
  the network (false with EXECD_JOB_NETWORK_NAMESPACE, as condor_starter's
  NO_JOB_NETWORKING) and condor_ssh_to_job (`HasSshd`: whether SSH_TO_JOB_SSHD can be
  executed, as condor_starter -classad says it). An ability condor_starter lacks is
  left out of its ad (HasJava, HasDocker, HasSingularity): execd's starter has none of
  TDP, job deferral, OsUser, per-file encryption, common files, self-checkpoint
  transfers or the local JICs, so they are left out. `HasVM` is the startd's own (its
  VM universe manager publishes false without a VM universe), not the starter's;
- hibernation as condor_startd publishes it where the machine cannot hibernate
  (execd never does): level 0, state "NONE", no supported states, `CanHibernate`
  false; the network adapter of the advertised address (`HardwareAddress`,
  `SubnetMask`) with no wake-on-LAN (execd does not read the NIC's WOL capabilities,
  and a machine that never sleeps needs no waking); `Unhibernate` is UNHIBERNATE or
  its default;
- the execute volume: `DetectedDisk` (KiB the EXECUTE filesystem holds),
  `ExecuteVolume` (its device number, sysapi_partition_id's st_dev) and
  `HasRotationalScratch` (/sys/dev/block/<major>:<minor>/queue/rotational of that
  device; false on a device of major 0, tmpfs and the like; left out when unknown);
- what daemon core puts in every ad: `CondorVersion` and `CondorPlatform` (execd's
  own: the version execd speaks, its build id "execd", and the platform it runs on,
  `<Arch>-<OpSysShortName>_<OpSysMajorVer>`, not the platform of an HTCondor build it
  is not), `AddressV1` (MyAddress in the v1 form, execd.wire.sinful) and the
  domains;
- `TimeToLive` (INT_MAX: execd never plans its own exit), `IsLocalStartd`
  (IS_LOCAL_STARTD);
- on a partitionable slot `NumDynamicSlotsTime`: when its NumDynamicSlots last changed
  (condor_startd's latch on SYSTEM_STARTD_LATCH_EXPRS = NumDynamicSlots).

DaemonStartTime, DaemonLastReconfigTime and UpdateSequenceNumber are the collector
client's (execd.wire.advertiser), as in HTCondor's DCCollector. `limits()` says how
execd.wire.startd_ads builds WithinResourceLimits (the knobs WithinResourceLimits and
STARTD_JOB_HAS_REQUEST_ATTRS).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd.classads import ClassAdError, parse_expr
from execd.daemon.self_monitor import DutyCycle, SelfMonitor
from execd.slots.ads import machine_attributes
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.security import CONDOR_VERSION
from execd.wire.sinful import parse_sinful, v1_address

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember

INT_MAX = 2**31 - 1
# What execd's starter does (module docstring); the order is condor_starter's.
STARTER_ABILITIES: dict[str, bool] = {
    "HasSshd": False,  # condor_ssh_to_job: SSH_TO_JOB_SSHD is executable (has_sshd)
    "HasReconnect": True,
    "HasFileTransfer": True,
    "HasTransferInputRemaps": True,
}
NETWORKING = "HasJobNetworking"
PLUGIN_METHODS = "HasFileTransferPluginMethods"
JOB_PLUGINS = "HasJobTransferPlugins"
DISABLE_JOB_PLUGINS = "HasDisableUserTransferPlugins"
HIBERNATION: dict[str, Any] = {
    "HibernationLevel": 0, "HibernationState": "NONE", "HibernationSupportedStates": "",
    "CanHibernate": False, "IsWakeOnLanSupported": False, "IsWakeOnLanEnabled": False,
    "IsWakeAble": False, "WakeOnLanSupportedFlags": "NONE", "WakeOnLanEnabledFlags": "NONE",
}  # fmt: skip
UNHIBERNATE_DEFAULT = "MY.MachineLastMatchTime =!= UNDEFINED"
NO_ADAPTER = ("00:00:00:00:00:00", "0.0.0.0")  # noqa: S104 (a mask, not a bind address)
SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B


def starter_abilities(job_networking: bool, plugin_methods: str = "",
                      url_transfers: bool = False, disable_job_plugins: str = "",
                      sshd: str = "") -> dict[str, Any]:  # fmt: skip
    """`disable_job_plugins`: STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS's text,
    advertised (HasDisableUserTransferPlugins) as condor_starter -classad prints it;
    the caller puts it in the ad as an expression, the value here is a placeholder.
    `sshd`: SSH_TO_JOB_SSHD, HasSshd when it can be executed (an empty one cannot)."""
    abilities: dict[str, Any] = dict(STARTER_ABILITIES)
    abilities["HasSshd"] = bool(sshd) and os.access(sshd, os.X_OK)
    if url_transfers:  # ENABLE_URL_TRANSFERS: the job's own plugins (TransferPlugins) too
        abilities[JOB_PLUGINS] = True
    if plugin_methods:  # condor_starter lists them where it has plugins
        abilities[PLUGIN_METHODS] = plugin_methods
    if url_transfers and disable_job_plugins:
        abilities[DISABLE_JOB_PLUGINS] = disable_job_plugins
    abilities[NETWORKING] = job_networking
    return {**abilities, "StarterAbilityList": ",".join(abilities), "HasVM": False}


def _parses(text: str) -> bool:
    try:
        parse_expr(text)
    except ClassAdError:
        return False
    return True


def rotational(device: int, sys_root: str = "/sys") -> bool | None:
    """Whether the block device `device` (an st_dev) spins: None when /sys does not
    say (no such block device: an overlay, a partition-less volume)."""
    if os.major(device) == 0:  # tmpfs, ramdisks, overlays: memory, no platter
        return False
    path = Path(sys_root, "dev/block", f"{os.major(device)}:{os.minor(device)}",
                "queue/rotational")  # fmt: skip
    try:
        flag = path.read_text()[:1]
    except OSError:
        return None
    return flag == "1" if flag else None


def execute_volume(execute: str) -> dict[str, Any]:
    """DetectedDisk (the filesystem's size in KiB), ExecuteVolume (its st_dev) and
    HasRotationalScratch (where /sys knows)."""
    try:
        fs, st = os.statvfs(execute), os.stat(execute)
    except OSError:
        return {}
    values: dict[str, Any] = {"DetectedDisk": fs.f_blocks * fs.f_frsize // 1024,
                              "ExecuteVolume": str(st.st_dev)}  # fmt: skip
    if (spins := rotational(st.st_dev)) is not None:
        values["HasRotationalScratch"] = spins
    return values


def condor_platform(machine: dict[str, Any]) -> str:
    """CondorPlatform as HTCondor writes it (`$CondorPlatform: X86_64-AlmaLinux_9 $`),
    of the machine execd runs on: execd is no build of HTCondor's for a platform."""
    version = machine.get("OpSysMajorVer", "")
    name = machine.get("OpSysShortName") or machine.get("OpSys", "")
    return f"$CondorPlatform: {machine.get('Arch', '')}-{name}_{version} $"


def _ioctl_ipv4(sock: socket.socket, request: int, interface: str) -> str:
    packed = struct.pack("256s", interface.encode()[:15])
    return socket.inet_ntoa(fcntl.ioctl(sock.fileno(), request, packed)[20:24])


def network_adapter(ip: str) -> tuple[str, str]:
    """(HardwareAddress, SubnetMask) of the interface that holds `ip`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            with contextlib.suppress(OSError):
                if _ioctl_ipv4(sock, SIOCGIFADDR, name) != ip:
                    continue
                mask = _ioctl_ipv4(sock, SIOCGIFNETMASK, name)
                mac = Path(f"/sys/class/net/{name}/address").read_text().strip()
                return mac or NO_ADAPTER[0], mask
    return NO_ADAPTER


class DynamicSlotsLatch:
    """NumDynamicSlotsTime: per partitionable slot, when NumDynamicSlots last changed
    (the first value seen counts as a change, as condor_startd's latch)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[Any, int]] = {}

    def time(self, slot: str, value: Any, now: float) -> int:
        seen = self._seen.get(slot)
        if seen is None or seen[0] != value:
            seen = self._seen[slot] = (value, int(now))
        return seen[1]


class DaemonAttributes:
    """Builds the daemon-level part of a slot's public ad; `for_slot` per ad."""

    def __init__(self, member: PoolMember) -> None:
        daemon = member.daemon
        self.member = member
        self.stats = daemon.startd_stats
        settings = daemon.settings
        quantum = settings.get_int("STATISTICS_WINDOW_QUANTUM") or 240
        self.duty = DutyCycle(settings.get_int("STATISTICS_WINDOW_SECONDS") or 1200, quantum)
        self.monitor = SelfMonitor(quantum, sockets=member.server.open_connections,
                                   sessions=lambda: len(member.security.sessions))  # fmt: skip
        self.latch = DynamicSlotsLatch()
        self._adapter: tuple[str, tuple[str, str, str]] | None = None
        self._static_ad: tuple[Any, WireAd] | None = None
        self._static_methods = ""
        self._common: tuple[tuple[Any, ...], WireAd] | None = None

    def _adapter_of(self, address: str) -> tuple[str, str, str]:
        """(HardwareAddress, SubnetMask, AddressV1) of the advertised address."""
        if self._adapter is None or self._adapter[0] != address:
            host = parse_sinful(address).host if address else ""
            mac, mask = network_adapter(host) if host else NO_ADAPTER
            self._adapter = (address, (mac, mask, v1_address(address) if host else ""))
        return self._adapter[1]

    def _static(self) -> WireAd:
        """The attributes only a reload can change (kept per Settings object)."""
        settings = self.member.daemon.settings
        plugins = self.member.lookups.plugins
        methods = plugins.methods_attr() if plugins is not None else ""
        if self._static_ad is None or self._static_ad[0] is not settings \
                or self._static_methods != methods:  # fmt: skip
            self._static_methods = methods
            config = self.member.config
            machine = machine_attributes(self.member.daemon.node.slots.facts)
            # the job's own plugins run only in a cgroup: none, no HasJobTransferPlugins
            cgroups = self.member.daemon.jobs.tree is not None
            disable = (settings.get_str("STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS")
                       or "").strip()  # fmt: skip
            if disable and not _parses(disable):
                disable = ""  # condor_starter prints it only when it is an expression
            values = {
                "CondorVersion": CONDOR_VERSION, "CondorPlatform": condor_platform(machine),
                "UidDomain": config.domain, "FileSystemDomain": config.filesystem_domain,
                **starter_abilities(not settings.get_bool("EXECD_JOB_NETWORK_NAMESPACE"),
                                    methods, plugins is not None and cgroups, disable,
                                    settings.get_str("SSH_TO_JOB_SSHD") or ""),
                **HIBERNATION, "TimeToLive": INT_MAX,
                "IsLocalStartd": settings.get_bool("IS_LOCAL_STARTD"),
            }  # fmt: skip
            ad = from_values(values)
            if DISABLE_JOB_PLUGINS in values:
                ad[DISABLE_JOB_PLUGINS] = disable
            ad["Unhibernate"] = settings.get_str("UNHIBERNATE") or UNHIBERNATE_DEFAULT
            self._static_ad = (settings, ad)
        return self._static_ad[1]

    def limits(self) -> dict[str, Any]:
        """How the slot ads' WithinResourceLimits is built (execd.wire.startd_ads)."""
        settings = self.member.daemon.settings
        return {"configured": (settings.text("WithinResourceLimits") or "").strip() or None,
                "job_has_request_attrs": settings.get_bool("STARTD_JOB_HAS_REQUEST_ATTRS")}

    def common(self, now: float) -> WireAd:
        """What every slot ad of this moment carries: built once for all the slots of
        an advertising round (same second, no event counted, as many slots)."""
        daemon = self.member.daemon
        key = (int(now), self.stats.events, len(daemon.engine.slots), daemon.settings)
        if self._common is not None and self._common[0] == key:
            return self._common[1]
        mac, mask, v1 = self._adapter_of(self.member.address)
        values: dict[str, Any] = {
            "TotalSlots": len(daemon.engine.slots), **({"AddressV1": v1} if v1 else {}),
            **self.stats.publish(now),
            **self.monitor.attributes(now),
            **self.duty.attributes(time.monotonic()),
            "HardwareAddress": mac, "SubnetMask": mask,
            **execute_volume(str(daemon.paths.execute)),
        }  # fmt: skip
        ad = {**self._static(), **from_values(values)}
        self._common = (key, ad)
        return ad

    def for_slot(self, name: str, slot_ad: Any) -> WireAd:
        now = time.time()
        ad = dict(self.common(now))
        if slot_ad.get("PartitionableSlot") is True:
            changed = self.latch.time(name, slot_ad.get("NumDynamicSlots"), now)
            ad["NumDynamicSlotsTime"] = str(changed)
        return ad
