"""Mips/KFlops: positive measurements, a weighted average across runs, LastBenchmark."""

from __future__ import annotations

import pytest

from execd.hooks.benchmarks import Benchmarks, measure_kflops, measure_mips


def test_measurements_are_positive() -> None:
    assert measure_mips(10_000) > 0
    assert measure_kflops(10_000) > 0


def test_weighted_average_and_last_benchmark() -> None:
    b = Benchmarks(weight=0.25)
    assert b.result.ad_attributes() == {"Mips": 0, "KFlops": 0, "LastBenchmark": 0}
    first = b.record(100.0, 1000.0, now=1_700_000_000.7)
    assert first.ad_attributes() == {"Mips": 100, "KFlops": 1000, "LastBenchmark": 1_700_000_000}
    second = b.record(200.0, 2000.0, now=1_700_000_100)
    assert (second.mips, second.kflops, second.runs) == (125, 1250, 2)
    assert second.last_benchmark == 1_700_000_100


def test_weight_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="weight"):
        Benchmarks(weight=0)
