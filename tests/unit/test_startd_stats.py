"""condor_startd's counters and their Recent* window (execd/daemon/startd_stats.py):
totals since the start; Recent<Name> over five 4-minute buckets that move on only when
the counters are published, so an event drops out at the fifth quantum boundary after
it (between 16 and 20 minutes), as HTCondor's generic_stats_Tick moves them."""

from __future__ import annotations

import pytest

from execd.daemon.startd_stats import (
    COUNTERS,
    MIB,
    RECENT_QUANTUM_S,
    StartdStats,
    TransferBytes,
)

T0 = 1_800_000_000


def test_every_counter_starts_at_zero_with_its_recent_twin() -> None:
    published = StartdStats().publish(T0)
    assert published == {**{n: 0 for n in COUNTERS}, **{f"Recent{n}": 0 for n in COUNTERS}}
    assert len(published) == 14


def test_events_count_in_the_total_and_the_recent_window() -> None:
    stats = StartdStats()
    stats.count("JobStarts")
    stats.count("JobStarts")
    stats.count("ClaimRequests")
    published = stats.publish(T0)
    assert (published["JobStarts"], published["RecentJobStarts"]) == (2, 2)
    assert (published["ClaimRequests"], published["RecentClaimRequests"]) == (1, 1)
    assert published["JobPreemptions"] == 0


def test_an_event_leaves_recent_at_the_fifth_quantum_boundary_after_it() -> None:
    stats = StartdStats()
    stats.publish(T0)  # the first publish starts the window's clock
    stats.count("JobStarts")
    for quanta in range(1, 5):  # four quanta later it is still recent
        stats.publish(T0 + quanta * RECENT_QUANTUM_S)
        assert stats.publish(T0 + quanta * RECENT_QUANTUM_S)["RecentJobStarts"] == 1
    stats.publish(T0 + 5 * RECENT_QUANTUM_S)  # publish, then the window moves on
    after = stats.publish(T0 + 5 * RECENT_QUANTUM_S)
    assert (after["JobStarts"], after["RecentJobStarts"]) == (1, 0)


def test_the_window_moves_only_at_publish_and_by_whole_quanta() -> None:
    stats = StartdStats()
    stats.publish(T0)
    stats.count("ActivationRequests")
    # a publish 19 minutes later: the value published is before this tick's move
    assert stats.publish(T0 + 19 * 60)["RecentActivationRequests"] == 1
    # that tick moved four quanta (19 min // 4): the event is in the oldest bucket
    assert stats.publish(T0 + 19 * 60 + 1)["RecentActivationRequests"] == 1
    # the fifth boundary (20 min): published as it was, then the event is out
    assert stats.publish(T0 + 20 * 60)["RecentActivationRequests"] == 1
    published = stats.publish(T0 + 20 * 60 + 1)
    assert (published["ActivationRequests"], published["RecentActivationRequests"]) == (1, 0)


def test_a_long_silence_empties_the_window_but_not_the_total() -> None:
    stats = StartdStats()
    stats.publish(T0)
    stats.count("JobRankPreemptions", 3)
    stats.publish(T0 + 86400)
    published = stats.publish(T0 + 86401)
    assert (published["JobRankPreemptions"], published["RecentJobRankPreemptions"]) == (3, 0)


def test_a_clock_set_back_moves_nothing() -> None:
    stats = StartdStats()
    stats.publish(T0)
    stats.count("NewDSlotNotMatch")
    stats.publish(T0 - 3600)
    assert stats.publish(T0 - 3599)["RecentNewDSlotNotMatch"] == 1


def test_an_unknown_counter_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="no startd counter named 'JobStart'"):
        StartdStats().count("JobStart")


def test_transfer_bytes_are_summed_and_averaged_per_job_in_mib() -> None:
    tally = TransferBytes()
    assert tally.attributes() == {"AvgTransferInputMB": 0.0, "TotalTransferInputMB": 0.0,
                                  "AvgTransferOutputMB": 0.0, "TotalTransferOutputMB": 0.0}
    tally.add(3 * MIB, MIB)
    tally.add(MIB, 0)
    assert tally.attributes() == {"AvgTransferInputMB": 2.0, "TotalTransferInputMB": 4.0,
                                  "AvgTransferOutputMB": 0.5, "TotalTransferOutputMB": 1.0}
    tally.add(1, 0)  # HTCondor's probe divides whole bytes: the average drops the remainder
    assert tally.attributes()["AvgTransferInputMB"] == (4 * MIB + 1) // 3 / MIB
