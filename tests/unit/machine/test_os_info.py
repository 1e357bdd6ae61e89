"""OpSys* as HTCondor 25.x derives them on Linux: the long name from the first issue
file that names a known distribution (else os-release's PRETTY_NAME), OpSysName =
OpSysShortName from that name, versions from its first number, OpSysLegacy = LINUX."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.os_info import OsInfo, detect_os
from execd.machine.reader import FixtureHostReader
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots

BOOKWORM_OS_RELEASE = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\n'


def os_of(root: Path, files: dict[str, str]) -> OsInfo:
    (root / "etc").mkdir(exist_ok=True)
    for name, text in files.items():
        (root / "etc" / name).write_text(text)
    return detect_os(FixtureHostReader(root))


def summary(info: OsInfo) -> tuple[str, str, str, int, str, str]:
    return (info.opsys_long_name, info.opsys_name, info.opsys_and_ver, info.opsys_ver,
            info.opsys_short_name, info.opsys_legacy)  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), [
    # this pool's host: /etc/issue wins over os-release, its getty escapes cut off
    ({"issue": "Debian GNU/Linux 12 \\n \\l\n\n", "os-release": BOOKWORM_OS_RELEASE},
     ("Debian GNU/Linux 12", "Debian", "Debian12", 1200, "Debian", "LINUX")),
    # the pool's chroot (Debian sid): no number, so condor_startd says Debian0 / 0
    ({"issue": "Debian GNU/Linux forky/sid \\n \\l\n\n"},
     ("Debian GNU/Linux forky/sid", "Debian", "Debian0", 0, "Debian", "LINUX")),
    # RHEL: /etc/issue's "\\S" names no distribution; redhat-release does
    ({"issue": "\\S\nKernel \\r on an \\m\n",
      "redhat-release": "Red Hat Enterprise Linux release 9.4 (Plow)\n"},
     ("Red Hat Enterprise Linux release 9.4 (Plow)", "RedHat", "RedHat9", 904, "RedHat",
      "LINUX")),
    ({"issue": "Ubuntu 22.04.3 LTS \\n \\l\n"},
     ("Ubuntu 22.04.3 LTS", "Ubuntu", "Ubuntu22", 2204, "Ubuntu", "LINUX")),
    ({"system-release": "Amazon Linux release 2023.5.20240805 (Amazon Linux)\n"},
     ("Amazon Linux release 2023.5.20240805 (Amazon Linux)", "AmazonLinux",
      "AmazonLinux2023", 202305, "AmazonLinux", "LINUX")),
    # a distribution HTCondor does not know: PRETTY_NAME for the long name, LINUX for the rest
    ({"issue": "Arch Linux \\r (\\l)\n",
      "os-release": 'NAME="Arch Linux"\nPRETTY_NAME="Arch Linux"\n'},
     ("Arch Linux", "LINUX", "LINUX0", 0, "LINUX", "LINUX")),
    ({}, ("Unknown", "LINUX", "LINUX0", 0, "LINUX", "LINUX")),
])  # fmt: skip
def test_linux_distributions(node_copy: Any, files: dict[str, str],
                             expected: tuple[str, str, str, int, str, str]) -> None:  # fmt: skip
    assert summary(os_of(node_copy("hybrid-cgroup-node"), files)) == expected


def test_arch_from_uname(node_copy: Any) -> None:
    info = os_of(node_copy("hybrid-cgroup-node"), {"issue": "Debian GNU/Linux 12 \\n \\l\n"})
    assert info.arch == "X86_64"  # FixtureHostReader's uname machine is x86_64


@pytest.mark.parametrize(("issue", "published"), [
    ("Debian GNU/Linux 12 \\n \\l\n", {"OpSysAndVer": "Debian12", "OpSysVer": 1200,
                                        "OpSysMajorVer": 12}),
    # condor_startd publishes OpSysVer and OpSysMajorVer only when they are not 0
    ("Debian GNU/Linux forky/sid \\n \\l\n", {"OpSysAndVer": "Debian0", "OpSysVer": None,
                                              "OpSysMajorVer": None}),
])  # fmt: skip
def test_slot_ad_os_attributes(node_copy: Any, issue: str, published: dict[str, Any]) -> None:
    root = node_copy("hybrid-cgroup-node")
    os_of(root, {"issue": issue})
    facts = detect_machine(FixtureHostReader(root), DetectionParams(execute_dir="/tmp",
                                                                    hostname="h"))  # fmt: skip
    (ad,) = NodeSlots(facts, build_layout(default_slot_types(), facts)).build_ads(now=1000)
    expected = {**published, "OpSys": "LINUX", "OpSysLegacy": "LINUX", "OpSysName": "Debian",
                "OpSysShortName": "Debian"}  # fmt: skip
    assert {k: ad.get(k) for k in expected} == expected
