"""CondorLoadAvg from a job cgroup's cumulative CPU use (JobLoadMeter)."""

from __future__ import annotations

from execd.machine.load import JobLoadMeter


def test_load_is_cpu_seconds_per_wall_second_over_the_window() -> None:
    meter = JobLoadMeter(window_s=60)
    meter.sample(100.0, {"slot1_1": 0, "slot1_2": 0})
    meter.sample(110.0, {"slot1_1": 10_000_000, "slot1_2": 2_500_000})  # 1 and 0.25 CPUs
    assert meter.loads() == {"slot1_1": 1.0, "slot1_2": 0.25}


def test_old_samples_leave_the_window() -> None:
    meter = JobLoadMeter(window_s=60)
    meter.sample(0.0, {"slot1": 0})
    meter.sample(60.0, {"slot1": 60_000_000})  # busy for a minute
    meter.sample(120.0, {"slot1": 60_000_000})  # then idle for one
    assert meter.loads() == {"slot1": 0.0}


def test_a_slot_without_a_job_is_forgotten_and_a_new_job_starts_afresh() -> None:
    meter = JobLoadMeter()
    meter.sample(0.0, {"slot1_1": 5_000_000})
    assert meter.loads() == {"slot1_1": 0.0}  # one sample: no rate yet
    meter.sample(1.0, {})
    assert meter.loads() == {}
    meter.sample(2.0, {"slot1_1": 100})  # a new job: its counter starts low
    meter.sample(4.0, {"slot1_1": 1_000_100})
    assert meter.loads() == {"slot1_1": 0.5}
