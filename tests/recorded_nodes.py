"""The recorded nodes in tests/fixtures, and a fake NVML that answers what the H100
node's real pynvml answered (no GPU exists on the CI machine)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import namedtuple
from pathlib import Path
from typing import Any

import pynvml

FIXTURES = Path(__file__).resolve().parent / "fixtures"

_Memory = namedtuple("_Memory", "total free used")
_Pci = namedtuple("_Pci", "busId")


class RecordedNvml:
    """The part of pynvml's API execd uses, answering what a real node answered."""

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVMLError = pynvml.NVMLError

    def __init__(self, recording: dict[str, Any], fail_on: str | None = None) -> None:
        self.rec = recording
        self.fail_on = fail_on
        self.initialised = 0

    def _maybe_fail(self, name: str) -> None:
        if self.fail_on == name:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    def nvmlInit(self) -> None:
        self._maybe_fail("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return int(self.rec["cuda_driver"])

    def nvmlSystemGetDriverVersion(self) -> str:
        return str(self.rec["driver"])

    def nvmlDeviceGetCount(self) -> int:
        self._maybe_fail("nvmlDeviceGetCount")
        return len(self.rec["devices"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        self._maybe_fail("nvmlDeviceGetHandleByIndex")
        return dict(self.rec["devices"][index])

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:
        return str(h["uuid"])

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:
        return str(h["name"])

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> _Memory:
        return _Memory(h["memory_total"], h["memory_total"], 0)

    def nvmlDeviceGetCudaComputeCapability(self, h: dict[str, Any]) -> tuple[int, int]:
        return (h["compute_capability"][0], h["compute_capability"][1])

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> _Pci:
        return _Pci(h["pci_bus_id"])

    def nvmlDeviceGetMaxClockInfo(self, h: dict[str, Any], clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return int(h["clock_max_sm_mhz"])

    def nvmlDeviceGetEccMode(self, h: dict[str, Any]) -> tuple[int, int]:
        return (h["ecc_mode"][0], h["ecc_mode"][1])

    def nvmlDeviceGetMinorNumber(self, h: dict[str, Any]) -> int:
        if "minor_number" not in h:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return int(h["minor_number"])


def smi_minor_numbers(node: str = "h100-node") -> dict[str, int]:
    """UUID -> device minor number, as nvidia-smi -q (NVML's nvmlDeviceGetMinorNumber)
    reported it on the recorded node."""
    root = ET.parse(FIXTURES / node / "nvml/nvidia-smi-q.xml").getroot()
    return {str(gpu.findtext("uuid")): int(str(gpu.findtext("minor_number")))
            for gpu in root.iter("gpu")}


def h100_recording() -> dict[str, Any]:
    """pynvml.json, each device with the minor number nvidia-smi -q recorded for it."""
    loaded: dict[str, Any] = json.loads((FIXTURES / "h100-node/nvml/pynvml.json").read_text())
    minors = smi_minor_numbers()
    for device in loaded["devices"]:
        if device["uuid"] in minors:
            device["minor_number"] = minors[device["uuid"]]
    return loaded
