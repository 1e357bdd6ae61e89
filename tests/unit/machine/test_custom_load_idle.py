"""Custom resources, the load split of seed 000 (3.5.10), and idle times."""

from __future__ import annotations

import pytest
from recorded_nodes import FIXTURES

from execd.errors import ResourceError
from execd.machine.custom import parse_machine_resource, run_inventory
from execd.machine.idle import detect_idle
from execd.machine.load import SlotLoadInput, read_total_load_avg, split_load
from execd.machine.reader import CommandResult, FixtureHostReader

HYBRID = FIXTURES / "hybrid-cgroup-node"


def test_machine_resource_count_and_list() -> None:
    assert parse_machine_resource("Cogs", "4").count == 4
    listed = parse_machine_resource("Actuator", "act0, act1 act2")
    assert (listed.count, listed.instances) == (3, ("act0", "act1", "act2"))


@pytest.mark.parametrize(("value", "message"), [
    ("-2", "cannot be negative"), ("a, a", "lists an id twice"), ("", "is empty"),
    ("x{y}", "not a valid id"),
])
def test_bad_machine_resource_values(value: str, message: str) -> None:
    with pytest.raises(ResourceError, match=message):
        parse_machine_resource("Cogs", value)


def _inventory(stdout: str, rc: int = 0) -> FixtureHostReader:
    return FixtureHostReader(HYBRID, commands={"/usr/bin/inv": CommandResult(rc, stdout, "boom")})


def test_inventory_command_names_instances() -> None:
    reader = _inventory('DetectedFPGA = "fpga0, fpga1"\nFPGA_Vendor = "x"\n')
    res = run_inventory(reader, "FPGA", "/usr/bin/inv -list")
    assert res.instances == ("fpga0", "fpga1") and res.count == 2


@pytest.mark.parametrize(("stdout", "rc", "message"), [
    ("garbage\n", 0, "has no DetectedFPGA line .*'garbage'"),
    ("DetectedFPGA = fpga0\n", 0, 'expected DetectedFPGA = "id1'),
    ('DetectedFPGA = "fp ga0;rm"\n', 0, "not a valid id"),
    ("", 3, "exited with status 3: boom"),
])
def test_inventory_garbage_is_a_clear_error(stdout: str, rc: int, message: str) -> None:
    with pytest.raises(ResourceError, match=message):
        run_inventory(_inventory(stdout, rc), "FPGA", "/usr/bin/inv")


def test_inventory_command_missing() -> None:
    with pytest.raises(ResourceError, match="/no/such/inv is not installed"):
        run_inventory(FixtureHostReader(HYBRID), "FPGA", "/no/such/inv")


def test_total_load_from_recorded_loadavg() -> None:
    assert read_total_load_avg(FixtureHostReader(FIXTURES / "h100-node")) == 0.14


def test_load_split_condor_load_first_then_owner_load_to_owner_slots() -> None:
    slots = [SlotLoadInput("slot1", 1.0), SlotLoadInput("slot2", 0.0),
             SlotLoadInput("slot3", 0.0, in_owner_state=True), SlotLoadInput("slot4", 0.0)]
    # 1.0 from HTCondor's job, 1.5 owner load: slot3 (Owner) first, then slot2
    assert split_load(2.5, slots) == {"slot1": 1.0, "slot2": 0.5, "slot3": 1.0, "slot4": 0.0}


def test_load_split_left_over_load_goes_over_one_when_slots_run_out() -> None:
    slots = [SlotLoadInput("slot1", 0.0), SlotLoadInput("slot2", 0.0)]
    assert split_load(3.0, slots) == {"slot1": 2.0, "slot2": 1.0}


def test_idle_times_from_device_atimes() -> None:
    now = 10_000.0
    reader = FixtureHostReader(HYBRID, now=now, atimes={"/dev/console": now - 300})
    idle = detect_idle(reader, since=now - 5000)
    assert (idle.keyboard_idle, idle.console_idle) == (300, 300)


def test_idle_without_devices_counts_from_daemon_start() -> None:
    reader = FixtureHostReader(HYBRID, now=10_000.0)
    idle = detect_idle(reader, since=9_000.0)
    assert (idle.keyboard_idle, idle.console_idle) == (1000, 1000)
