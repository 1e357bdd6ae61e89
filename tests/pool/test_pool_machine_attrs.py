"""The processor and host attributes jobs match on are those condor_startd publishes.

The pool's condor_startd and `execd run` on the same machine: their slot ads (in
condor_status) carry the same has_<flag> attributes, Microarch, CpuFamily,
CpuModelNumber, CpuCacheSize, Utsname* and OpSysLegacy. A job whose requirements are
condor_startd's flags and Microarch (`has_avx2 && Microarch == "x86_64-v3"` on an AVX2
machine) runs on execd.

OpSysName, OpSysShortName, OpSysLongName, OpSysAndVer, OpSysVer and OpSysMajorVer come
from /etc (issue files, os-release): condor_startd runs in the chroot and reads the
chroot's (Debian sid: "Debian0"), execd runs on the host and reads the host's, so their
values differ where those files differ. What is compared for them: execd's rules applied
to the chroot's /etc give condor_startd's values, and execd's ad has
OpSysShortName == OpSysName as condor_startd's has.

The derivation from /proc/cpuinfo is also judged on CPUs this machine does not have:
the recorded nodes' cpuinfo (tests/fixtures: an Intel Sapphire Rapids and an AMD Zen 4,
both x86_64-v4) and edits of it, bind-mounted over the chroot's /proc/cpuinfo for
condor_startd, give the attributes execd computes from the same text; and the OpSys*
rules on other distributions' /etc files (Ubuntu, RHEL, Rocky, an unknown one, none).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from pool_node import WAIT_S, start_node, wait_pool
from recorded_nodes import FIXTURES
from test_pool_harness import ECHO_JOB
from test_pool_preemption import slot_ad

from execd.machine.cpu_flags import cpu_attributes, parse_cpuinfo
from execd.machine.os_info import detect_os
from execd.machine.reader import FixtureHostReader, LiveHostReader

SAME = ("Microarch", "CpuFamily", "CpuModelNumber", "CpuCacheSize", "UtsnameSysname",
        "UtsnameNodename", "UtsnameRelease", "UtsnameVersion", "UtsnameMachine",
        "OpSysLegacy", "OpSys", "Arch")  # fmt: skip
FROM_ETC = ("OpSysName", "OpSysShortName", "OpSysLongName", "OpSysAndVer", "OpSysVer",
            "OpSysMajorVer")  # fmt: skip


def machine_attributes(ad: dict[str, Any]) -> dict[str, Any]:
    """The slot ad's has_<flag> attributes and those in SAME (absent ones as None)."""
    return {**{k: v for k, v in ad.items() if k.startswith("has_")},
            **{k: ad.get(k) for k in SAME}}  # fmt: skip


def requirements_of(ad: dict[str, Any]) -> str:
    """A job's requirements that only a slot with this ad's flags and level matches."""
    terms = [k for k in ad if k.startswith("has_")]
    if ad.get("Microarch"):
        terms.append(f'Microarch == "{ad["Microarch"]}"')
    return " && ".join(terms)


def edited(node: str, edit: Callable[[list[str]], list[str]]) -> str:
    """A recorded node's /proc/cpuinfo with its flags lines rewritten by edit."""
    lines = (FIXTURES / node / "proc/cpuinfo").read_text().splitlines()
    return "".join((head + ": " + " ".join(edit(flags.split(" "))) if line.startswith("flags")
                    else line) + "\n"
                   for line in lines for head, _, flags in [line.partition(": ")])  # fmt: skip


def no_avx512(*names: str) -> Callable[[list[str]], list[str]]:
    return lambda flags: [f for f in flags if f not in names and not f.startswith("avx512")]


CPUINFOS = {
    "h100-node": edited("h100-node", lambda flags: flags),
    "hybrid-cgroup-node": edited("hybrid-cgroup-node", lambda flags: flags),
    # the flag printed last is never seen (HTCondor keeps the newline on it): v3
    "avx512f-last": edited("h100-node",
                           lambda fl: [f for f in fl if f != "avx512f"] + ["avx512f"]),
    "v4-without-avx": edited("h100-node", lambda fl: [f for f in fl if f != "avx"]),
    "v2": edited("hybrid-cgroup-node", no_avx512("avx")),
    "v3-without-lahf_lm": edited("hybrid-cgroup-node", no_avx512("lahf_lm")),
    "v1": edited("hybrid-cgroup-node", no_avx512("avx", "popcnt")),
}  # fmt: skip


def cpu_part(ad: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ad.items() if k.startswith("has_") or k in (
        "Microarch", "CpuFamily", "CpuModelNumber", "CpuCacheSize")}  # fmt: skip


def startd_off(pool: harness.Pool) -> None:
    pool.tool("condor_off", "-startd").check()
    harness.wait_for("condor_startd's slot gone", lambda: not pool.status("-slots"), WAIT_S, 0.2)


def startd_on(pool: harness.Pool) -> dict[str, Any]:
    """condor_on, not condor_restart: the master restarts a daemon that exited after a
    growing delay (10 s, 11 s, 13 s, ...), but starts one turned off at once."""
    pool.tool("condor_on", "-startd").check()
    return slot_ad(pool, lambda ad: True)


@contextlib.contextmanager
def startd_reading(pool: harness.Pool, files: dict[str, str]) -> Iterator[dict[str, Any]]:
    """condor_startd started anew with these texts as these files of the chroot (its slot
    ad), and again on the real ones afterwards. An existing file (/proc/cpuinfo, /etc/issue)
    gets the text bind-mounted over it; a missing one is written, then removed."""
    startd_off(pool)
    try:
        with tempfile.TemporaryDirectory(prefix="execd-files-") as tmp, \
                contextlib.ExitStack() as undo:  # fmt: skip
            for n, (path, text) in enumerate(files.items()):
                target = pool.host_path(path)
                if target.exists():
                    (fake := Path(tmp) / str(n)).write_text(text)
                    subprocess.run(["mount", "--bind", str(fake), str(target)], check=True)
                    undo.callback(subprocess.run, ["umount", str(target)], check=True)
                else:
                    target.write_text(text)
                    undo.callback(target.unlink)
            try:
                yield startd_on(pool)
            finally:
                startd_off(pool)
    finally:
        startd_on(pool)


@pytest.mark.parametrize("name", CPUINFOS)
def test_cpu_attributes_from_cpuinfo_as_condor_startd(
        running_pool: harness.RunningPool, name: str) -> None:  # fmt: skip
    files = {"/proc/cpuinfo": CPUINFOS[name]}
    with startd_reading(running_pool.get(with_startd=True), files) as theirs:
        assert cpu_part(theirs) == cpu_attributes(parse_cpuinfo(CPUINFOS[name], "x86_64"))


# Files of /etc, as distributions have them ("" reads as HTCondor reads a missing one).
ETCS = {
    "ubuntu": {"/etc/issue": "Ubuntu 22.04.3 LTS \\n \\l\n\n"},
    "rhel": {"/etc/issue": "\\S\nKernel \\r on an \\m\n",
             "/etc/redhat-release": "Red Hat Enterprise Linux release 9.4 (Plow)\n"},
    "rocky": {"/etc/issue": "", "/etc/issue.net": "",
              "/etc/system-release": "Rocky Linux release 8.10 (Green Obsidian)\n"},
    "unknown": {"/etc/issue": "Arch Linux \\r (\\l)\n", "/etc/issue.net": "Arch Linux\n",
                "/etc/os-release": 'NAME="Arch Linux"\nPRETTY_NAME="Arch Linux"\n'},
    "nothing": {"/etc/issue": "", "/etc/issue.net": "", "/etc/os-release": ""},
}  # fmt: skip


def os_expected(pool: harness.Pool) -> dict[str, Any]:
    """The OpSys* execd's rules derive from the chroot's /etc, as condor_startd publishes
    them (OpSysVer and OpSysMajorVer not when 0)."""
    found = detect_os(FixtureHostReader(pool.root, uname=LiveHostReader().uname()))
    return {"OpSysName": found.opsys_name, "OpSysShortName": found.opsys_short_name,
            "OpSysLongName": found.opsys_long_name, "OpSysAndVer": found.opsys_and_ver,
            "OpSysVer": found.opsys_ver or None,
            "OpSysMajorVer": found.opsys_ver // 100 or None}  # fmt: skip


@pytest.mark.parametrize("name", ETCS)
def test_opsys_from_etc_as_condor_startd(running_pool: harness.RunningPool, name: str) -> None:
    pool = running_pool.get(with_startd=True)
    with startd_reading(pool, ETCS[name]) as theirs:
        assert {k: theirs.get(k) for k in FROM_ETC} == os_expected(pool)


def test_machine_attributes_as_on_condor_startd(running_pool: harness.RunningPool) -> None:
    reference = running_pool.get(with_startd=True)
    (theirs,) = reference.status("-slots")
    # the chroot's /etc seen through execd's detection, as condor_startd sees it
    assert {k: theirs.get(k) for k in FROM_ETC} == os_expected(reference)

    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = start_node(pool, Path(tmp))
        try:
            (ours,) = wait_pool(pool, "execd's slot", lambda s: list(s.values()))
            assert machine_attributes(ours) == machine_attributes(theirs)
            job = pool.submit(ECHO_JOB.replace(
                "queue", f"requirements = {requirements_of(theirs)}\nqueue"))  # fmt: skip
            job.wait_for_event("005", WAIT_S)
            ran = [e for e in node.events() if e["event"] == "starter_spawned"]
        finally:
            node.stop(signal.SIGQUIT)
    assert any(k.startswith("has_") for k in theirs), "condor_startd advertises no flag"
    # physical memory and free swap (KB), read by each at its start: free swap may have
    # moved a little in between
    vm = theirs["TotalVirtualMemory"]
    assert abs(ours["TotalVirtualMemory"] - vm) <= vm // 100
    assert (ours["VirtualMemory"], theirs["VirtualMemory"]) == (  # the slot's: all of it
        ours["TotalVirtualMemory"], vm)
    assert ours["OpSysShortName"] == ours["OpSysName"]
    assert theirs["OpSysShortName"] == theirs["OpSysName"]
    assert len(ran) == 1  # the job that requires condor_startd's flags ran on execd
    assert job.output("out.txt") == "hi\n"
