"""What condor_startd says of the processor: has_<flag>, Microarch, CpuFamily,
CpuModelNumber and CpuCacheSize, read from /proc/cpuinfo as HTCondor 25.x reads it.

Jobs match on these (``requirements = has_avx2``, ``Microarch >= "x86_64-v3"``), so
execd publishes the same values condor_startd would on the same machine:

- Only the first ``flags`` line counts (HTCondor assumes identical cores). Its words
  are split on single spaces, and HTCondor keeps the line's newline on the last word,
  so the last flag of the line never matches anything: it is left out here too.
- has_<flag> = true for each of avx, avx2, avx512_vnni, avx512dq, avx512f, sse4_1,
  sse4_2 and ssse3 that the CPU has; nothing for the ones it lacks.
- Microarch (x86_64 machines only; other architectures publish none) is the highest
  x86-64 level whose own instructions are all present, each level checked alone:
  v4 = avx512f, avx512bw, avx512cd, avx512dq, avx512vl; v3 = avx, avx2, bmi1, bmi2,
  f16c, fma, abm, movbe, xsave; v2 = cx16, lahf_lm, popcnt, sse4_1, sse4_2, ssse3;
  otherwise x86_64-v1.
- CpuFamily, CpuModelNumber and CpuCacheSize are the leading integers of the
  ``cpu family``, ``model`` and ``cache size`` (KiB) lines, the last processor's,
  published only when greater than 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from execd.machine.reader import HostReader

# The flags HTCondor turns into has_<flag> attributes.
ADVERTISED_FLAGS = (
    "avx", "avx2", "avx512_vnni", "avx512dq", "avx512f", "sse4_1", "sse4_2", "ssse3",
)  # fmt: skip
# x86-64 microarchitecture levels, highest first, with the flags each one needs.
_V4 = frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})
_V3 = frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})
_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"})
MICROARCH_LEVELS = (("x86_64-v4", _V4), ("x86_64-v3", _V3), ("x86_64-v2", _V2))
_LEADING_INT = re.compile(r"\s*([+-]?\d+)")
_NUMBERS = {"cpu family": "family", "model": "model", "cache size": "cache_kb"}


@dataclass(frozen=True)
class CpuFlags:
    flags: frozenset[str] = frozenset()  # the first flags line's words, as HTCondor sees them
    family: int = -1
    model: int = -1
    cache_kb: int = -1
    machine: str = "x86_64"  # uname's machine: Microarch exists on x86_64 only


def parse_cpuinfo(text: str, machine: str) -> CpuFlags:
    flags: frozenset[str] | None = None
    numbers = {"family": -1, "model": -1, "cache_kb": -1}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if not colon:
            continue
        name = name.rstrip()
        if not value[:1].isspace():  # HTCondor takes a value only after a blank
            value = ""
        if name == "flags" and flags is None:
            flags = frozenset(value.split(" ")[:-1]) - {""}
        elif name in _NUMBERS:
            number = _LEADING_INT.match(value)
            if number:  # the last processor's value stands
                numbers[_NUMBERS[name]] = int(number.group(1))
    return CpuFlags(flags=flags or frozenset(), machine=machine, **numbers)


def detect_cpu_flags(reader: HostReader, machine: str) -> CpuFlags:
    return parse_cpuinfo(reader.read_text("/proc/cpuinfo") or "", machine)


def microarch(cpu: CpuFlags) -> str | None:
    if cpu.machine != "x86_64":
        return None
    for level, needs in MICROARCH_LEVELS:
        if needs <= cpu.flags:
            return level
    return "x86_64-v1"


def cpu_attributes(cpu: CpuFlags) -> dict[str, Any]:
    """The slot ad attributes condor_startd publishes for this processor."""
    attrs: dict[str, Any] = {f"has_{f}": True for f in ADVERTISED_FLAGS if f in cpu.flags}
    for attr, value in (("CpuModelNumber", cpu.model), ("CpuFamily", cpu.family),
                        ("CpuCacheSize", cpu.cache_kb)):  # fmt: skip
        if value > 0:
            attrs[attr] = value
    level = microarch(cpu)
    if level is not None:
        attrs["Microarch"] = level
    return attrs
