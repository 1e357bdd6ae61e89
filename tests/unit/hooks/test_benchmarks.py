"""Mips/KFlops: positive measurements, a weighted average across runs, LastBenchmark."""

from __future__ import annotations

import pytest

from execd.hooks.benchmarks import Benchmarks, measure_kflops, measure_mips, runs_at_startup
from execd.policy import actions as act
from tests.unit.policy_helpers import Driver


def test_measurements_are_positive() -> None:
    assert measure_mips(10_000) > 0
    assert measure_kflops(10_000) > 0


def test_weighted_average_and_last_benchmark() -> None:
    b = Benchmarks(weight=0.25)
    # before any run only LastBenchmark = 0 (seed 000); no made-up Mips/KFlops
    assert b.result.ad_attributes() == {"LastBenchmark": 0}
    first = b.record(100.0, 1000.0, now=1_700_000_000.7)
    assert first.ad_attributes() == {"Mips": 100, "KFlops": 1000, "LastBenchmark": 1_700_000_000}
    second = b.record(200.0, 2000.0, now=1_700_000_100)
    assert (second.mips, second.kflops, second.runs) == (125, 1250, 2)
    assert second.last_benchmark == 1_700_000_100


def test_weight_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="weight"):
        Benchmarks(weight=0)


def test_startup_run_when_runbenchmarks_is_defined_and_not_false() -> None:
    assert runs_at_startup("(time() - LastBenchmark) >= 3600")
    assert runs_at_startup("True")
    assert not runs_at_startup(None)  # not defined
    assert not runs_at_startup("False")
    assert not runs_at_startup(" FALSE ")


def test_runbenchmarks_true_asks_the_daemon_to_run_them() -> None:
    d = Driver({"RUNBENCHMARKS": "True"})
    assert d.pair == "Unclaimed/Benchmarking"
    assert act.RunBenchmarks("slot1") in d.actions
    quiet = Driver({"RUNBENCHMARKS": "False"})
    assert not any(isinstance(a, act.RunBenchmarks) for a in quiet.actions)


def test_a_claim_during_benchmarking_is_taken() -> None:
    d = Driver({"RUNBENCHMARKS": "True"})
    assert d.pair == "Unclaimed/Benchmarking"
    assert d.claim()
    assert d.pair == "Claimed/Idle"
    assert d.transitions()[-1] == "5"
