"""The Mips and KFlops benchmarks (seed 000: RUNBENCHMARKS, LastBenchmark).

Two small built-in loops: an integer one (Mips: millions of loop operations a second)
and a floating-point one (KFlops: thousands of float operations a second). They are
measurements of this Python process's speed on the node, comparable between nodes
running execd, not Dhrystone/Linpack figures. Each run goes into a weighted average
(the newest run counts BENCHMARK_WEIGHT, the history the rest), so one disturbed run
moves the published figure only a little.

The policy engine decides when to run them (RUNBENCHMARKS); `run_benchmarks` does the
measurement in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from execd import log

__all__ = [
    "BenchmarkResult", "BenchmarkRunner", "Benchmarks", "measure_kflops", "measure_mips",
    "run_benchmarks", "runs_at_startup",
]

logger = log.get_logger("benchmarks")

BENCHMARK_WEIGHT = 0.25  # the newest run's share of the average (the first run counts fully)
_MIPS_LOOPS = 400_000
_KFLOPS_LOOPS = 200_000


def measure_mips(loops: int = _MIPS_LOOPS) -> float:
    """Millions of integer operations per second (4 operations per loop)."""
    x, y = 1, 7
    start = time.perf_counter()
    for i in range(loops):
        x = (x * 3 + i) & 0xFFFF
        y ^= x
    elapsed = max(time.perf_counter() - start, 1e-9)
    return loops * 4 / elapsed / 1e6


def measure_kflops(loops: int = _KFLOPS_LOOPS) -> float:
    """Thousands of floating-point operations per second (4 operations per loop)."""
    a, b = 1.0000001, 0.9999999
    acc = 0.0
    start = time.perf_counter()
    for _ in range(loops):
        acc = acc * b + a
        a = a * 1.0000001 - 1e-9
    elapsed = max(time.perf_counter() - start, 1e-9)
    return loops * 4 / elapsed / 1e3


@dataclass(frozen=True)
class BenchmarkResult:
    mips: int
    kflops: int
    last_benchmark: int  # wall-clock seconds of the last run (LastBenchmark); 0: never
    runs: int = 0

    def ad_attributes(self) -> dict[str, int]:
        """The slot-ad attributes: LastBenchmark (0 before any run), Mips and KFlops once
        measured."""
        if self.runs == 0:
            return {"LastBenchmark": 0}
        return {"Mips": self.mips, "KFlops": self.kflops, "LastBenchmark": self.last_benchmark}


class Benchmarks:
    """The running weighted average of benchmark runs."""

    def __init__(self, weight: float = BENCHMARK_WEIGHT) -> None:
        if not 0 < weight <= 1:
            raise ValueError(f"benchmark weight {weight} must be in (0, 1]")
        self.weight = weight
        self._mips = 0.0
        self._kflops = 0.0
        self.result = BenchmarkResult(mips=0, kflops=0, last_benchmark=0)

    def record(self, mips: float, kflops: float, now: float) -> BenchmarkResult:
        """Fold one run into the average; NOW is wall time, published as LastBenchmark."""
        if self.result.runs == 0:
            self._mips, self._kflops = mips, kflops
        else:
            w = self.weight
            self._mips = (1 - w) * self._mips + w * mips
            self._kflops = (1 - w) * self._kflops + w * kflops
        self.result = replace(
            self.result,
            mips=round(self._mips),
            kflops=round(self._kflops),
            last_benchmark=int(now),
            runs=self.result.runs + 1,
        )
        return self.result


def _measure_both() -> tuple[float, float]:
    return measure_mips(), measure_kflops()


async def run_benchmarks(benchmarks: Benchmarks, *, now: float | None = None) -> BenchmarkResult:
    """Measure in a worker thread (the event loop keeps running) and record the run."""
    mips, kflops = await asyncio.to_thread(_measure_both)
    return benchmarks.record(mips, kflops, time.time() if now is None else now)


def runs_at_startup(runbenchmarks_text: str | None) -> bool:
    """Seed 000: one run at startup when RUNBENCHMARKS is defined and not FALSE."""
    if runbenchmarks_text is None:
        return False
    return runbenchmarks_text.strip().lower() not in ("", "false", "0")


class BenchmarkRunner:
    """Runs the benchmarks when asked, one run at a time, in a task the daemon owns.

    Requests that arrive while a run is going are folded into it: every slot that
    entered Unclaimed/Benchmarking before the run ends is done when it ends.
    ON_DONE gets each run's result, on the event loop.
    """

    def __init__(self, on_done: Callable[[BenchmarkResult], None],
                 benchmarks: Benchmarks | None = None) -> None:
        self.benchmarks = benchmarks or Benchmarks()
        self.on_done = on_done
        self.running = False
        self._wanted = asyncio.Event()

    @property
    def result(self) -> BenchmarkResult:
        return self.benchmarks.result

    def request(self, reason: str) -> None:
        if not self.running and not self._wanted.is_set():
            logger.info("benchmarks_requested", reason=reason)
        self._wanted.set()

    async def run(self) -> None:
        """The loop the daemon's TaskGroup owns: wait for a request, measure, report."""
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            self.running = True
            started = time.monotonic()
            try:
                result = await run_benchmarks(self.benchmarks)
            finally:
                self.running = False
            self._wanted.clear()  # requests made during the run are answered by it
            logger.info("benchmarks_finished", mips=result.mips, kflops=result.kflops,
                        runs=result.runs, seconds=round(time.monotonic() - started, 3))
            self.on_done(result)
