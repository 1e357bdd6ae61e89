"""GPU detection: the recorded H100 through a fake NVML, and the real pynvml with no driver."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest
from recorded_nodes import RecordedNvml, h100_recording
from structlog.testing import capture_logs

from execd.machine.gpus import detect_gpus, short_gpu_id


def test_h100_properties_from_recorded_nvml(h100_nvml: RecordedNvml) -> None:
    (gpu,) = detect_gpus(h100_nvml)
    assert gpu.id == "GPU-ed351562"
    p = gpu.properties
    assert p["DeviceName"] == "NVIDIA H100 80GB HBM3"
    assert p["Capability"] == 9.0
    assert p["GlobalMemoryMb"] == 81559  # nvidia-smi said 81559 MiB on that node
    # as condor_gpu_discovery -properties names them: CUDA's bus id, no ClockMhz (-extra)
    assert p["DevicePciBusId"] == "0000:00:06.0"
    assert "ClockMhz" not in p
    assert p["NvidiaDriver"] == "580.159.04"
    assert p["MaxSupportedVersion"] == 13000
    assert p["ECCEnabled"] is True
    assert p["DriverVersion"] == 13.0
    assert p["DeviceUuid"] == "ed351562-b6da-78d5-6864-16084094a18f"
    assert h100_nvml.initialised == 0  # shut NVML down again


def test_driver_version_is_written_as_condor_gpu_discovery_writes_it() -> None:
    rec = dict(h100_recording(), cuda_driver=12040)  # "%d.%d" of 12, 40: 12.40, not 12.04
    ((gpu),) = detect_gpus(RecordedNvml(rec))
    assert (gpu.properties["DriverVersion"], gpu.properties["MaxSupportedVersion"]) == (
        12.4, 12040)


def test_short_id() -> None:
    assert short_gpu_id("GPU-6a96bd13-1111-2222-3333-444455556666") == "GPU-6a96bd13"


def test_real_pynvml_without_a_driver_means_zero_gpus_and_a_log_line() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; the no-driver path needs one without")
    with capture_logs() as events:
        assert detect_gpus(pynvml) == ()
    assert [e["event"] for e in events] == ["gpu_detection_skipped"]
    assert "NVML" in events[0]["reason"]


@pytest.mark.parametrize("where", ["nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex"])
def test_nvml_errors_mean_zero_gpus_not_a_crash(where: str) -> None:
    assert detect_gpus(RecordedNvml(h100_recording(), fail_on=where)) == ()


def test_no_pynvml_module_means_zero_gpus() -> None:
    assert detect_gpus(None) == ()


def test_two_gpus(h100_nvml: Any) -> None:
    rec = h100_recording()
    second = dict(rec["devices"][0], index=1, uuid="GPU-6a96bd13-0000-0000-0000-000000000000",
                  compute_capability=[8, 0])
    rec["devices"].append(second)
    gpus = detect_gpus(RecordedNvml(rec))
    assert [(g.id, g.properties["Capability"]) for g in gpus] == [
        ("GPU-ed351562", 9.0), ("GPU-6a96bd13", 8.0)]
