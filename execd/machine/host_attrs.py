"""The machine attributes condor_startd publishes about the processor, the kernel and
the OS beyond Arch/OpSys*: has_<flag>, Microarch, CpuFamily, CpuModelNumber,
CpuCacheSize (execd.machine.cpu_flags), Utsname* (uname(2) as is), OpSysShortName,
OpSysLegacy, and OpSysVer/OpSysMajorVer where not 0 (execd.machine.os_info). Every slot
ad carries them."""

from __future__ import annotations

from typing import Any

from execd.machine.cpu_flags import cpu_attributes
from execd.machine.facts import MachineFacts


def host_attributes(facts: MachineFacts) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if facts.opsys_ver:  # a name without a number ("Debian GNU/Linux forky/sid") has none
        attrs["OpSysVer"] = facts.opsys_ver
        attrs["OpSysMajorVer"] = facts.opsys_ver // 100
    if facts.opsys_short_name:
        attrs["OpSysShortName"] = facts.opsys_short_name
    if facts.opsys_legacy:
        attrs["OpSysLegacy"] = facts.opsys_legacy
    if facts.uname is not None:
        u = facts.uname
        attrs.update(UtsnameSysname=u.sysname, UtsnameNodename=u.nodename,
                     UtsnameRelease=u.release, UtsnameVersion=u.version,
                     UtsnameMachine=u.machine)  # fmt: skip
    if facts.cpu is not None:
        attrs.update(cpu_attributes(facts.cpu))
    return attrs
