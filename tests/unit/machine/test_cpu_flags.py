"""has_<flag>, Microarch, CpuFamily, CpuModelNumber and CpuCacheSize from /proc/cpuinfo
of the recorded nodes, and the Utsname* attributes, as condor_startd 25.x publishes them.

The expected values are read off the recorded cpuinfo by hand:
- h100-node (Intel Xeon, Sapphire Rapids): "cpu family : 6", "model : 207",
  "cache size : 307200 KB"; its flags have avx, avx2, avx512_vnni, avx512dq, avx512f,
  sse4_1, sse4_2 and ssse3 (every flag HTCondor advertises), and all of x86-64-v4's
  avx512f, avx512bw, avx512cd, avx512dq, avx512vl -> Microarch "x86_64-v4".
- hybrid-cgroup-node (AMD EPYC, Zen 4): family 25, model 17, cache 1024 KB; the same
  eight advertised flags and the same five AVX-512 ones -> "x86_64-v4".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from recorded_nodes import FIXTURES

from execd.machine.cpu_flags import cpu_attributes, detect_cpu_flags, parse_cpuinfo
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.reader import FixtureHostReader, Uname
from execd.slots.layout import build_layout, default_slot_types
from execd.slots.node import NodeSlots

ALL_FLAGS = {f"has_{f}": True for f in ("avx", "avx2", "avx512_vnni", "avx512dq", "avx512f",
                                        "sse4_1", "sse4_2", "ssse3")}  # fmt: skip
UNAME = Uname("Linux", "node7", "6.1.0-28-amd64", "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1",
              "x86_64")  # fmt: skip
# An arm64 machine's cpuinfo (Neoverse N1): "Features", no "flags" nor "cpu family".
ARM64_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""


def edit_flags(root: Path, edit: Any) -> FixtureHostReader:
    """The node's recorded cpuinfo with every flags line rewritten by edit(list of flags)
    (a copy of the node, edited again from the recording on each call)."""
    cpuinfo = root / "proc/cpuinfo"
    lines = []
    for line in (FIXTURES / root.name / "proc/cpuinfo").read_text().splitlines():
        head, _, flags = line.partition(": ")
        lines.append(head + ": " + " ".join(edit(flags.split(" ")))
                     if line.startswith("flags") else line)  # fmt: skip
    cpuinfo.write_text("\n".join(lines) + "\n")
    return FixtureHostReader(root)


def test_h100_node_slot_ads_carry_its_cpu_and_uname_attributes(h100_reader: Any) -> None:
    reader = FixtureHostReader(h100_reader.root, uname=UNAME)
    facts = detect_machine(reader, DetectionParams(execute_dir="/tmp", hostname="h100",
                                                   gpu_discovery=None))  # fmt: skip
    node = NodeSlots(facts, build_layout(default_slot_types(), facts))
    (ad,) = node.build_ads(now=1000)
    expected = {**ALL_FLAGS, "Microarch": "x86_64-v4", "CpuFamily": 6, "CpuModelNumber": 207,
                "CpuCacheSize": 307200, "UtsnameSysname": "Linux", "UtsnameNodename": "node7",
                "UtsnameRelease": "6.1.0-28-amd64",
                "UtsnameVersion": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1",
                "UtsnameMachine": "x86_64", "OpSysLegacy": "LINUX"}  # fmt: skip
    assert {k: ad.get(k) for k in expected} == expected
    assert not [k for k in ad if k.startswith("has_") and k not in ALL_FLAGS]


def test_hybrid_node_amd_epyc(hybrid_reader: Any) -> None:
    attrs = cpu_attributes(detect_cpu_flags(hybrid_reader, "x86_64"))
    assert attrs == {**ALL_FLAGS, "Microarch": "x86_64-v4", "CpuFamily": 25,
                     "CpuModelNumber": 17, "CpuCacheSize": 1024}  # fmt: skip


def test_without_avx512bw_the_level_is_v3_and_avx512_flags_stay(node_copy: Any) -> None:
    # x86-64-v4 needs avx512bw; v3's avx avx2 bmi1 bmi2 f16c fma abm movbe xsave are there
    reader = edit_flags(node_copy("h100-node"), lambda fl: [f for f in fl if f != "avx512bw"])
    attrs = cpu_attributes(detect_cpu_flags(reader, "x86_64"))
    assert attrs["Microarch"] == "x86_64-v3"
    assert {k for k in attrs if k.startswith("has_")} == set(ALL_FLAGS)


def test_a_cpu_without_avx512_like_this_pools_epyc(node_copy: Any) -> None:
    """The pool's host (AMD EPYC, no AVX-512): condor_startd publishes has_avx, has_avx2,
    has_sse4_1, has_sse4_2, has_ssse3 and x86_64-v3 (/work/wt/prompts' ad capture)."""
    reader = edit_flags(node_copy("hybrid-cgroup-node"), without())
    attrs = cpu_attributes(detect_cpu_flags(reader, "x86_64"))
    assert {k for k in attrs if k.startswith("has_")} == {
        "has_avx", "has_avx2", "has_sse4_1", "has_sse4_2", "has_ssse3"}
    assert attrs["Microarch"] == "x86_64-v3"


def without(*names: str) -> Any:
    """An edit that drops these flags and every avx512* one (a CPU like this pool's)."""
    return lambda fl: [f for f in fl if f not in names and not f.startswith("avx512")]


def test_each_level_is_checked_alone(node_copy: Any) -> None:
    # without lahf_lm (a v2 flag) the v3 and v4 sets are still complete: condor_startd
    # does not require the lower levels (std::includes per level), so v4 it stays
    root = node_copy("h100-node")
    reader = edit_flags(root, lambda fl: [f for f in fl if f != "lahf_lm"])
    assert cpu_attributes(detect_cpu_flags(reader, "x86_64"))["Microarch"] == "x86_64-v4"
    # likewise v4 does not need v3: AVX-512 without avx is still v4
    reader = edit_flags(root, lambda fl: [f for f in fl if f != "avx"])
    attrs = cpu_attributes(detect_cpu_flags(reader, "x86_64"))
    assert attrs["Microarch"] == "x86_64-v4" and "has_avx" not in attrs


def test_v2_and_v1(node_copy: Any) -> None:
    root = node_copy("hybrid-cgroup-node")
    reader = edit_flags(root, without("avx"))
    attrs = cpu_attributes(detect_cpu_flags(reader, "x86_64"))
    assert attrs["Microarch"] == "x86_64-v2" and "has_avx" not in attrs
    reader = edit_flags(root, without("avx", "popcnt"))
    assert cpu_attributes(detect_cpu_flags(reader, "x86_64"))["Microarch"] == "x86_64-v1"


def test_the_last_flag_of_the_line_is_not_seen(node_copy: Any) -> None:
    """condor_startd keeps the line's newline on the last flag ("avx512f\n"), so a flag
    the kernel prints last is never advertised, nor counted for Microarch."""
    reader = edit_flags(node_copy("h100-node"),
                        lambda fl: [f for f in fl if f != "avx512f"] + ["avx512f"])  # fmt: skip
    attrs = cpu_attributes(detect_cpu_flags(reader, "x86_64"))
    assert "has_avx512f" not in attrs and attrs["Microarch"] == "x86_64-v3"


def test_only_the_first_processors_flags_count(node_copy: Any) -> None:
    root = node_copy("hybrid-cgroup-node")
    text = (root / "proc/cpuinfo").read_text()
    first, second = text.split("\n\n", 1)
    (root / "proc/cpuinfo").write_text(first + "\n\n" + second.replace(" sse4_2", ""))
    assert "has_sse4_2" in cpu_attributes(detect_cpu_flags(FixtureHostReader(root), "x86_64"))
    (root / "proc/cpuinfo").write_text(first.replace(" sse4_2", "") + "\n\n" + second)
    assert "has_sse4_2" not in cpu_attributes(detect_cpu_flags(FixtureHostReader(root),
                                                               "x86_64"))  # fmt: skip


def test_arm64_has_no_flags_no_microarch_no_family() -> None:
    assert cpu_attributes(parse_cpuinfo(ARM64_CPUINFO, "aarch64")) == {}


def test_microarch_only_on_x86_64(h100_reader: Any) -> None:
    # the same flags on a machine uname does not call x86_64 (HTCondor's non-x86_64
    # builds compute no level): no Microarch, the flags and numbers stay
    attrs = cpu_attributes(detect_cpu_flags(h100_reader, "i686"))
    assert "Microarch" not in attrs and attrs["has_avx2"] is True and attrs["CpuFamily"] == 6


@pytest.mark.parametrize(("line", "published"), [
    ("model\t\t: 0", False),  # published only when greater than 0
    ("model\t\t: 85", True),
    ("model\t\t:85", False),  # HTCondor reads a value only after a blank
])  # fmt: skip
def test_model_number_published_only_when_positive(line: str, published: bool) -> None:
    attrs = cpu_attributes(parse_cpuinfo(f"processor\t: 0\n{line}\n", "x86_64"))
    assert ("CpuModelNumber" in attrs) is published
