"""Arch, OpSys and friends as HTCondor 25.x spells them on Linux.

- OpSysLongName: the first line of the first of /etc/issue, /etc/redhat-release,
  /etc/system-release and /etc/issue.net that names a distribution HTCondor knows
  (trailing blanks and getty's ``\\n``/``\\l`` escapes cut off); failing that,
  /etc/os-release's PRETTY_NAME; failing that, "Unknown".
- OpSysName = OpSysShortName: the distribution found in the long name (RedHat, Fedora,
  Ubuntu, Debian, SLCern, SLFermi, SL, CentOS, Rocky, AlmaLinux, AmazonLinux, openSUSE,
  SUSE), else "LINUX".
- OpSysMajorVer: the long name's first run of digits (0 if none); OpSysVer: major * 100
  plus up to two digits after a following '.'; OpSysAndVer: OpSysName + major.
- OpSys = OpSysLegacy = "LINUX" (uname's sysname is Linux); Arch from uname's machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from execd.machine.reader import HostReader

_ARCH = {"x86_64": "X86_64", "amd64": "X86_64", "i686": "INTEL", "i586": "INTEL",
         "i486": "INTEL", "i386": "INTEL", "i86pc": "INTEL"}  # fmt: skip
ISSUE_FILES = ("/etc/issue", "/etc/redhat-release", "/etc/system-release", "/etc/issue.net")
# (words that must all be in the lowercased long name, distribution), first match wins
_DISTROS = (
    (("red", "hat"), "RedHat"), (("fedora",), "Fedora"), (("ubuntu",), "Ubuntu"),
    (("debian",), "Debian"), (("scientific", "cern"), "SLCern"),
    (("scientific", "slf"), "SLFermi"), (("scientific",), "SL"), (("centos",), "CentOS"),
    (("rocky",), "Rocky"), (("almalinux",), "AlmaLinux"), (("amazon linux",), "AmazonLinux"),
    (("opensuse",), "openSUSE"), (("suse",), "SUSE"),
)  # fmt: skip
UNKNOWN = "Unknown"
_VERSION = re.compile(r"\D*(\d*)(?:\.(\d{1,2}))?")


@dataclass(frozen=True)
class OsInfo:
    arch: str
    opsys: str
    opsys_and_ver: str
    opsys_ver: int
    opsys_name: str
    opsys_long_name: str
    opsys_short_name: str = ""
    opsys_legacy: str = ""


def arch_name(machine: str) -> str:
    return _ARCH.get(machine.lower(), machine)


def linux_distribution(long_name: str) -> str:
    lowered = long_name.lower()
    for words, name in _DISTROS:
        if all(w in lowered for w in words):
            return name
    return "LINUX"


def _first_line(text: str) -> str:
    """The file's first line as HTCondor reads it (at most 199 characters), without
    trailing blanks and the ``\\n``/``\\l`` escapes /etc/issue ends with."""
    line = text[:199].split("\n", 1)[0] if text else UNKNOWN
    while True:
        line = line.rstrip()
        if len(line) > 2 and line[-2] == "\\" and line[-1] in "nl":
            line = line[:-2]
        else:
            return line


def _pretty_name(text: str) -> str | None:
    for line in text.splitlines():
        if "PRETTY_NAME" in line and '"' in line:
            return line.split('"', 2)[1]
    return None


def long_name(reader: HostReader) -> str:
    for path in ISSUE_FILES:
        text = reader.read_text(path)
        if text is not None and linux_distribution(line := _first_line(text)) != "LINUX":
            return line
    pretty = _pretty_name(reader.read_text("/etc/os-release") or "")
    return UNKNOWN if pretty is None else pretty


def version_of(long: str) -> tuple[int, int]:
    """(OpSysMajorVer, OpSysVer) from the long name: "Rocky Linux 9.4" -> (9, 904)."""
    if long == UNKNOWN:
        return 0, 0
    found = _VERSION.match(long)
    major = int(found.group(1)) if found and found.group(1) else 0
    minor = int(found.group(2)) if found and found.group(1) and found.group(2) else 0
    return major, major * 100 + minor


def detect_os(reader: HostReader, machine: str | None = None) -> OsInfo:
    uname = reader.uname()
    long = long_name(reader)
    name = linux_distribution(long)
    major, version = version_of(long)
    opsys = "LINUX" if uname.sysname.lower() == "linux" else uname.sysname.upper()
    return OsInfo(
        arch=arch_name(machine or uname.machine),
        opsys=opsys,
        opsys_and_ver=f"{name}{major}",
        opsys_ver=version,
        opsys_name=name,
        opsys_long_name=long,
        opsys_short_name=name,
        opsys_legacy=opsys,
    )
