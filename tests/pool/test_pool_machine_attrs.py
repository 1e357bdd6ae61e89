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
"""

from __future__ import annotations

import signal
import tempfile
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import WAIT_S, start_node, wait_pool
from test_pool_harness import ECHO_JOB

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


def test_machine_attributes_as_on_condor_startd(running_pool: harness.RunningPool) -> None:
    reference = running_pool.get(with_startd=True)
    (theirs,) = reference.status("-slots")
    # the chroot's /etc seen through execd's detection, as condor_startd sees it
    chroot = FixtureHostReader(reference.root, uname=LiveHostReader().uname())
    chroot_os = detect_os(chroot)
    assert {k: theirs.get(k) for k in FROM_ETC} == {  # a version of 0 is not published
        "OpSysName": chroot_os.opsys_name, "OpSysShortName": chroot_os.opsys_short_name,
        "OpSysLongName": chroot_os.opsys_long_name, "OpSysAndVer": chroot_os.opsys_and_ver,
        "OpSysVer": chroot_os.opsys_ver or None,
        "OpSysMajorVer": chroot_os.opsys_ver // 100 or None}  # fmt: skip

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
    assert ours["OpSysShortName"] == ours["OpSysName"]
    assert theirs["OpSysShortName"] == theirs["OpSysName"]
    assert len(ran) == 1  # the job that requires condor_startd's flags ran on execd
    assert job.output("out.txt") == "hi\n"
