"""Detection on nodes recorded on real machines (tests/fixtures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from execd.errors import ResourceError
from execd.machine.cgroup_limits import enclosing_limits, parse_cpu_list
from execd.machine.cpus import detect_cpus
from execd.machine.detect import DetectionParams, detect_machine
from execd.machine.reader import FixtureHostReader


def test_h100_node_detects_16_cpus_125_gib_and_the_free_disk(h100_reader: Any) -> None:
    facts = detect_machine(h100_reader, DetectionParams(execute_dir="/tmp", hostname="h100"))
    assert facts.detected_cpus == 16
    assert facts.detected_cores == 16  # one thread per core on that VM
    assert facts.total_cpus == 16
    assert facts.detected_memory_mb == 131981020 // 1024
    assert facts.total_memory_mb == facts.detected_memory_mb
    assert facts.total_disk_kb == 67089804  # df "Available" for the EXECUTE partition
    # condor_startd: MemTotal + SwapFree (no swap there)
    assert facts.total_vm_kb == 131981020
    assert [g.id for g in facts.gpus] == ["GPU-ed351562"]


def test_hybrid_node_detects_2_cpus_and_no_gpu(hybrid_reader: Any) -> None:
    facts = detect_machine(hybrid_reader, DetectionParams(execute_dir="/tmp", hostname="dev"))
    assert (facts.detected_cpus, facts.detected_cores) == (2, 2)
    assert facts.detected_memory_mb == 24684084 // 1024
    assert facts.total_disk_kb == 80110904
    assert facts.gpus == ()


def test_virtual_memory_is_physical_memory_and_free_swap(node_copy: Any) -> None:
    """TotalVirtualMemory as condor_startd counts it (sysinfo totalram + freeswap, KB),
    on the hybrid node's meminfo given 2 GiB of swap, 1.5 GiB of it free; and capped
    at the largest C int, as HTCondor's is, on a node with more than 2 TiB."""
    root = node_copy("hybrid-cgroup-node")
    meminfo = root / "proc/meminfo"
    text = meminfo.read_text()
    meminfo.write_text(text.replace("SwapTotal:             0 kB", "SwapTotal:       2097152 kB")
                       .replace("SwapFree:              0 kB", "SwapFree:        1572864 kB"))
    params = DetectionParams(execute_dir="/tmp", hostname="dev")
    facts = detect_machine(FixtureHostReader(root), params)
    assert facts.total_vm_kb == 24684084 + 1572864
    meminfo.write_text(text.replace("MemTotal:       24684084 kB", "MemTotal:     3221225472 kB"))
    assert detect_machine(FixtureHostReader(root), params).total_vm_kb == 2**31 - 1


def test_overrides_and_reservations_change_totals_not_detected(h100_reader: Any) -> None:
    params = DetectionParams(
        execute_dir="/tmp", num_cpus=64, memory_mb=4096, reserved_memory_mb=1024,
        reserved_disk_mb=10, hostname="h",
    )
    facts = detect_machine(h100_reader, params)
    assert facts.total_cpus == 64 and facts.detected_cpus == 16
    assert facts.total_memory_mb == 3072 and facts.detected_memory_mb == 131981020 // 1024
    assert facts.total_disk_kb == 67089804 - 10 * 1024


def test_reserved_memory_larger_than_the_node_is_a_clear_error(h100_reader: Any) -> None:
    with pytest.raises(ResourceError, match="RESERVED_MEMORY"):
        detect_machine(h100_reader, DetectionParams(execute_dir="/tmp", memory_mb=100,
                                                    reserved_memory_mb=200, hostname="h"))


def test_vanished_execute_directory_is_a_clear_error(node_copy: Any) -> None:
    reader = FixtureHostReader(node_copy("hybrid-cgroup-node"), missing_paths=("/gone",))
    with pytest.raises(ResourceError, match="EXECUTE directory '/gone/execute' does not exist"):
        detect_machine(reader, DetectionParams(execute_dir="/gone/execute", hostname="h"))


def test_enclosing_cgroup_memory_and_cpu_limits_lower_what_is_advertised(node_copy: Any) -> None:
    root: Path = node_copy("h100-node")
    unit = root / "sys/cgroup/system.slice/execd.service"
    unit.mkdir(parents=True)
    (unit / "memory.max").write_text("8589934592\n")  # 8 GiB
    (root / "sys/cgroup/system.slice/cpu.max").write_text("250000 100000\n")  # 2.5 CPUs
    (unit / "cpuset.cpus.effective").write_text("0-7\n")
    facts = detect_machine(FixtureHostReader(root), DetectionParams(execute_dir="/tmp",
                                                                    hostname="h"))
    assert facts.detected_memory_mb == 8192
    assert facts.detected_cpus == 3  # 2.5 CPUs of time needs 3 CPUs to run on


def test_unlimited_cgroup_max_is_ignored(node_copy: Any) -> None:
    root: Path = node_copy("h100-node")
    unit = root / "sys/cgroup/system.slice/execd.service"
    unit.mkdir(parents=True)
    (unit / "memory.max").write_text("max\n")
    (unit / "cpu.max").write_text("max 100000\n")
    limits = enclosing_limits(FixtureHostReader(root))
    assert limits.memory_bytes is None and limits.cpu_quota is None


def test_cpuset_and_affinity_restrict_cpus(node_copy: Any, h100_reader: Any) -> None:
    reader = FixtureHostReader(node_copy("h100-node"), affinity={0, 1, 2, 3})
    assert detect_cpus(reader, enclosing_limits(reader)).detected_cpus == 4


def test_hyperthreads_counted_or_not(node_copy: Any) -> None:
    root: Path = node_copy("hybrid-cgroup-node")
    # make the two CPUs siblings of one core, as on a hyperthreaded machine
    (root / "sys/cpu/cpu1/topology/core_id").write_text("0\n")
    reader = FixtureHostReader(root)
    limits = enclosing_limits(reader)
    assert detect_cpus(reader, limits, count_hyperthread_cpus=True).detected_cpus == 2
    counted = detect_cpus(reader, limits, count_hyperthread_cpus=False)
    assert (counted.detected_cpus, counted.detected_cores) == (1, 1)


def test_os_release_gives_opsys_and_ver(node_copy: Any) -> None:
    root: Path = node_copy("hybrid-cgroup-node")
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    )
    facts = detect_machine(FixtureHostReader(root),
                           DetectionParams(execute_dir="/tmp", hostname="h", arch="x86_64"))
    assert (facts.opsys, facts.opsys_and_ver, facts.opsys_ver) == ("LINUX", "Debian12", 1200)
    assert facts.opsys_long_name == "Debian GNU/Linux 12 (bookworm)"
    assert facts.arch == "X86_64"


@pytest.mark.parametrize(("text", "cpus"), [("0-3,8", {0, 1, 2, 3, 8}), ("5", {5}), ("", set())])
def test_parse_cpu_list(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


def test_configured_gpu_ids_replace_nvml(h100_reader: Any) -> None:
    params = DetectionParams(execute_dir="/tmp", hostname="h",
                             machine_resources={"GPUs": "GPU-aaaaaaaa, GPU-bbbbbbbb"})
    facts = detect_machine(h100_reader, params)
    assert [g.id for g in facts.gpus] == ["GPU-aaaaaaaa", "GPU-bbbbbbbb"]
    assert "GPUs" not in facts.custom


def test_machine_resource_gpus_zero_turns_gpus_off(h100_reader: Any) -> None:
    params = DetectionParams(execute_dir="/tmp", hostname="h", machine_resources={"GPUs": "0"})
    assert detect_machine(h100_reader, params).gpus == ()
