"""Arch, OpSys and friends as HTCondor spells them."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from execd.machine.reader import HostReader

_ARCH = {"x86_64": "X86_64", "amd64": "X86_64", "i686": "INTEL", "i386": "INTEL"}


@dataclass(frozen=True)
class OsInfo:
    arch: str
    opsys: str
    opsys_and_ver: str
    opsys_ver: int
    opsys_name: str
    opsys_long_name: str


def arch_name(machine: str) -> str:
    return _ARCH.get(machine.lower(), machine)


def _os_release(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq:
            values[key.strip()] = value.strip().strip('"')
    return values


def detect_os(reader: HostReader, machine: str | None = None) -> OsInfo:
    release = _os_release(reader.read_text("/etc/os-release") or "")
    name = release.get("NAME", "Linux").split()[0] or "Linux"
    version = release.get("VERSION_ID", "0")
    major, _, minor = version.partition(".")
    major_n = int(major) if major.isdigit() else 0
    minor_n = int(minor[:2]) if minor[:2].isdigit() else 0
    return OsInfo(
        arch=arch_name(machine or platform.machine()),
        opsys="LINUX",
        opsys_and_ver=f"{name}{major_n}" if major_n else name,
        opsys_ver=major_n * 100 + minor_n,
        opsys_name=name,
        opsys_long_name=release.get("PRETTY_NAME", name),
    )
