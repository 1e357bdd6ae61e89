"""Daemon core's view of the daemon itself (execd/daemon/self_monitor.py): the
MonitorSelf* sample, taken at most once per quantum, and the event loop's duty cycle,
1 - time in select / time of whole loop iterations, in total and over the recent
window."""

from __future__ import annotations

import asyncio
import os
import resource

import pytest

from execd.daemon.self_monitor import (
    CLOCK_TICKS,
    DutyCycle,
    ProcessSample,
    SelfMonitor,
    read_process_sample,
    this_process,
)

STAT = ("4242 (python3 (execd)) S 1 4242 4242 0 -1 4194560 900 0 0 0 "
        "250 50 0 0 20 0 3 0 1000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 "
        "16781312 134234626 0 0 0 17 1 0 0 0 0 0")  # fmt: skip


def test_a_proc_stat_line_gives_cpu_sizes_and_age() -> None:
    sample = read_process_sample(STAT, "30.00 55.00\n")
    assert sample.cpu_s == pytest.approx(300 / CLOCK_TICKS)  # utime + stime
    assert sample.image_kib == 102400  # vsize, bytes
    assert sample.rss_kib == 2560 * os.sysconf("SC_PAGE_SIZE") // 1024  # rss, pages
    assert sample.age_s == pytest.approx(30.0 - 1000 / CLOCK_TICKS)


def test_this_process_is_read_from_proc() -> None:
    sample = this_process()
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert 0 < sample.rss_kib <= peak_kib + 4
    assert sample.image_kib >= sample.rss_kib
    assert sample.age_s > 0


class Readings:
    def __init__(self, *samples: ProcessSample) -> None:
        self.samples = list(samples)
        self.reads = 0

    def __call__(self) -> ProcessSample:
        self.reads += 1
        return self.samples.pop(0)


def test_the_sample_is_taken_once_per_quantum_and_cpu_is_since_the_last() -> None:
    read = Readings(ProcessSample(cpu_s=2.0, image_kib=9000, rss_kib=4000, age_s=10.0),
                    ProcessSample(cpu_s=5.0, image_kib=9100, rss_kib=4100, age_s=70.0))
    monitor = SelfMonitor(60, sockets=lambda: 3, sessions=lambda: 7, read=read)
    first = monitor.attributes(1000.0)
    assert first == {
        "MonitorSelfTime": 1000, "MonitorSelfCPUUsage": 20.0,  # 2 s over its 10 s of life
        "MonitorSelfImageSize": 9000, "MonitorSelfResidentSetSize": 4000,
        "MonitorSelfAge": 10, "MonitorSelfRegisteredSocketCount": 3,
        "MonitorSelfSecuritySessions": 7,
    }  # fmt: skip
    assert monitor.attributes(1059.0) == first and read.reads == 1
    second = monitor.attributes(1060.0)
    assert second["MonitorSelfCPUUsage"] == pytest.approx(5.0)  # 3 s over 60 s
    assert (second["MonitorSelfTime"], second["MonitorSelfAge"]) == (1060, 70)


def test_duty_cycle_is_the_share_of_iterations_not_spent_waiting() -> None:
    duty = DutyCycle(window_s=1200, quantum_s=60)
    assert duty.attributes(0.0) == {"DaemonCoreDutyCycle": 0.0, "RecentDaemonCoreDutyCycle": 0.0}
    at = 0.0
    for _ in range(10):  # each iteration: 0.9 s waiting, then 0.1 s of work
        duty.selected(at, 0.9)
        at += 1.0
    duty.selected(at, 0.0)
    published = duty.attributes(at)
    assert published["DaemonCoreDutyCycle"] == pytest.approx(0.1)
    assert published["RecentDaemonCoreDutyCycle"] == pytest.approx(0.1)


def test_the_recent_duty_cycle_forgets_iterations_older_than_the_window() -> None:
    duty = DutyCycle(window_s=120, quantum_s=60)
    duty.selected(0.0, 0.0)
    duty.selected(100.0, 299.0)  # 100 s of work, long ago; then 299 s waiting
    duty.selected(400.0, 0.99)
    duty.selected(401.0, 0.99)  # lately: waiting nearly all the time
    duty.selected(402.0, 0.99)
    duty.selected(403.0, 0.0)
    published = duty.attributes(403.0)
    assert published["RecentDaemonCoreDutyCycle"] == pytest.approx(1 - 301.97 / 303)
    assert published["DaemonCoreDutyCycle"] == pytest.approx(1 - 301.97 / 403)


@pytest.mark.asyncio
async def test_an_idle_loop_is_timed_waiting_in_select() -> None:
    duty = DutyCycle(window_s=1200, quantum_s=60)
    assert duty.install(asyncio.get_running_loop())
    for _ in range(5):
        await asyncio.sleep(0.05)  # the loop waits in select for the timer
    published = duty.attributes(asyncio.get_running_loop().time())
    assert duty.waited >= 0.2
    assert 0.0 <= published["DaemonCoreDutyCycle"] < 0.5
