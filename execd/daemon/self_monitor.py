"""What HTCondor's daemon core says about the daemon itself on its ads: the self
monitor's `MonitorSelf*` sample and the event loop's duty cycle.

Self monitor (daemon core's SelfMonitorData, sampled every STATISTICS_WINDOW_QUANTUM,
default 240 s: the param table's, which wins over the 60 written in self_monitor.cpp;
the first at startup): MonitorSelfTime (when sampled), MonitorSelfAge
(seconds the process has run), MonitorSelfCPUUsage (percent of one CPU since the last
sample, over the whole life at the first), MonitorSelfImageSize and
MonitorSelfResidentSetSize (KiB), MonitorSelfRegisteredSocketCount (the command
server's open connections) and MonitorSelfSecuritySessions (sessions it holds).

Duty cycle: the share of its time the event loop spends doing work rather than waiting
for something to happen, 1 - (time in select) / (time of whole loop iterations), as
daemon core computes it from its pump cycles: DaemonCoreDutyCycle since the daemon
started, RecentDaemonCoreDutyCycle over the last STATISTICS_WINDOW_SECONDS (default
1200) in quanta of STATISTICS_WINDOW_QUANTUM.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True)
class ProcessSample:
    """One reading of /proc/self: CPU seconds, sizes in KiB, age in seconds."""

    cpu_s: float
    image_kib: int
    rss_kib: int
    age_s: float


def read_process_sample(stat_text: str, uptime_text: str) -> ProcessSample:
    """From /proc/self/stat and /proc/uptime (fields after the command's parenthesis)."""
    fields = stat_text[stat_text.rindex(")") + 2:].split()
    # fields[0] is field 3 of proc(5): utime is 14, stime 15, starttime 22, vsize 23, rss 24
    utime, stime = int(fields[11]), int(fields[12])
    started = int(fields[19]) / CLOCK_TICKS
    uptime = float(uptime_text.split(maxsplit=1)[0])
    return ProcessSample(cpu_s=(utime + stime) / CLOCK_TICKS, image_kib=int(fields[20]) // 1024,
                         rss_kib=int(fields[21]) * PAGE_KIB, age_s=max(0.0, uptime - started))


def this_process() -> ProcessSample:
    with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
        return read_process_sample(stat.read(), uptime.read())


class SelfMonitor:
    """The MonitorSelf* attributes, sampled at most once per `quantum_s`."""

    def __init__(self, quantum_s: int, sockets: Callable[[], int],
                 sessions: Callable[[], int],
                 read: Callable[[], ProcessSample] = this_process) -> None:  # fmt: skip
        self.quantum_s = quantum_s
        self.sockets = sockets
        self.sessions = sessions
        self.read = read
        self._last: tuple[float, ProcessSample] | None = None
        self._values: dict[str, Any] = {}

    def attributes(self, now: float) -> dict[str, Any]:
        if self._last is None or now - self._last[0] >= self.quantum_s or now < self._last[0]:
            self._sample(now)
        return dict(self._values)

    def _sample(self, now: float) -> None:
        sample = self.read()
        if self._last is None or now <= self._last[0]:
            used, elapsed = sample.cpu_s, sample.age_s
        else:
            used, elapsed = sample.cpu_s - self._last[1].cpu_s, now - self._last[0]
        self._last = (now, sample)
        self._values = {
            "MonitorSelfTime": int(now),
            "MonitorSelfCPUUsage": 100.0 * used / elapsed if elapsed > 0 else 0.0,
            "MonitorSelfImageSize": sample.image_kib,
            "MonitorSelfResidentSetSize": sample.rss_kib,
            "MonitorSelfAge": int(sample.age_s),
            "MonitorSelfRegisteredSocketCount": self.sockets(),
            "MonitorSelfSecuritySessions": self.sessions(),
        }


class DutyCycle:
    """Time the loop waited in select and time of whole loop iterations, in total and
    per quantum of the recent window. `selected(start, waited)` once per iteration."""

    def __init__(self, window_s: int, quantum_s: int) -> None:
        self.quantum_s = max(1, quantum_s)
        # daemon core rounds the window up to whole quanta
        self.buckets: deque[list[float]] = deque(maxlen=max(1, -(-window_s // self.quantum_s)))
        self._bucket = -1
        self.waited = 0.0
        self.cycles = 0.0
        self._previous: float | None = None  # when the last iteration's select began

    def selected(self, start: float, waited: float) -> None:
        """A select began at `start` (monotonic seconds) and waited `waited` seconds;
        the iteration before it ran from the previous select's start to `start`. Each
        goes into the quantum where it ended."""
        if self._previous is not None:
            self._add(start, start - self._previous, 0.0)
        self._previous = start
        self._add(start + waited, 0.0, waited)

    def _add(self, at: float, cycle: float, waited: float) -> None:
        bucket = int(at // self.quantum_s)
        if bucket != self._bucket:
            for _ in range(min(bucket - self._bucket, self.buckets.maxlen or 1)):
                self.buckets.append([0.0, 0.0])
            self._bucket = bucket
        self.cycles += cycle
        self.waited += waited
        self.buckets[-1][0] += cycle
        self.buckets[-1][1] += waited

    def attributes(self, now: float) -> dict[str, float]:
        """DaemonCoreDutyCycle and RecentDaemonCoreDutyCycle at monotonic `now`."""
        self._add(now, 0.0, 0.0)  # quanta with no iteration at all fall out too
        total = 1.0 - self.waited / self.cycles if self.cycles > 1e-9 else 0.0
        cycles = sum(b[0] for b in self.buckets)
        waited = sum(b[1] for b in self.buckets)
        recent = 1.0 - waited / cycles if cycles > 1e-9 else 0.0
        # select's waits can outrun the cycles they belong to at a bucket's edge:
        # never a negative share, as daemon core
        return {"DaemonCoreDutyCycle": max(0.0, total),
                "RecentDaemonCoreDutyCycle": max(0.0, recent)}

    def install(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Time the select of `loop` (a selector event loop); False where it has none
        to time (the attributes then stay 0)."""
        selector = getattr(loop, "_selector", None)  # asyncio keeps it private
        if selector is None or not callable(getattr(selector, "select", None)):
            return False
        select = selector.select

        def timed_select(timeout: float | None = None) -> Any:
            start = time.monotonic()
            try:
                return select(timeout)
            finally:
                self.selected(start, time.monotonic() - start)

        selector.select = timed_select
        return True
