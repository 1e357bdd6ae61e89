"""Reading STARTD_HISTORY for GET_HISTORY (execd/daemon/startd_history_query.py,
execd/daemon/pool_history.py) as condor_startd's `condor_history -inherit` child reads it.
The pool tier compares the same files through condor_history against condor_startd
(tests/pool/test_pool_startd_history.py); these pin the rules found in its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.classads import parse_expr
from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.pool_history import HistoryError, NoAnswer, history_query
from execd.daemon.startd_history_query import HistoryQuery, HistoryScan, history_files, projected
from execd.wire.classad_codec import to_classad
from execd.wire.commands import Command, within_limits

RECORDS = """\
ClusterId = 1
Owner = "alice"
Weight = ClusterId * 2
*** Offset = 0 ClusterId = 1 ProcId = 0 Owner = "alice" CurrentTime = 100
ClusterId = 2
not an attribute
*** Offset = 60 ClusterId = 2 ProcId = 0 Owner = "bob" CurrentTime = 200
ClusterId = 3
*** EPOCH ClusterId = 3 ProcId = 0 CurrentTime = 300
# a comment

ClusterId = 4
Owner = "dave"
*** Offset = 120 ClusterId = 4 ProcId = 0 Owner = "dave" CurrentTime = 400
ClusterId = 5
"""


def clusters(query: HistoryQuery, files: list[str]) -> list[int]:
    return [ad["ClusterId"] for ad in HistoryScan(query).records(files) if ad is not None]


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def test_backups_are_read_oldest_first_and_the_current_file_last(tmp_path: Path) -> None:
    for name in ("startd_history.20250102T000000", "startd_history.20241231T235959",
                 "startd_history.20250101T000000Z", "startd_history.old", "other.20250101T0000"):
        (tmp_path / name).write_text("")
    assert history_files(str(tmp_path / "startd_history")) == [
        str(tmp_path / "startd_history.20241231T235959"),
        str(tmp_path / "startd_history.20250102T000000")]  # no current file, no UTC one
    (tmp_path / "startd_history").write_text("")
    assert history_files(str(tmp_path / "startd_history"))[-1] == str(tmp_path / "startd_history")
    assert history_files(str(tmp_path / "missing" / "startd_history")) == []


def test_newest_first_skips_bad_records_other_types_and_a_record_being_written(
        tmp_path: Path) -> None:  # fmt: skip
    path = tmp_path / "startd_history"
    path.write_text(RECORDS)
    scan = HistoryScan(HistoryQuery())
    assert [ad["ClusterId"] for ad in scan.records([str(path)]) if ad is not None] == [4, 1]
    assert (scan.counts.read, scan.counts.matched) == (2, 2)  # the bad record counts nothing
    # oldest first: no type filter, the trailing lines are one more record
    assert clusters(HistoryQuery(forwards=True), [str(path)]) == [1, 3, 4, 5]


def test_since_limits_and_constraint(tmp_path: Path) -> None:
    path = tmp_path / "startd_history"
    path.write_text(RECORDS)
    files = [str(path)]
    assert clusters(HistoryQuery(since=parse_expr("ClusterId == 1")), files) == [4]
    assert clusters(HistoryQuery(match_limit=1), files) == [4]
    assert clusters(HistoryQuery(scan_limit=0), files) == [4, 1]  # 0: no limit
    assert clusters(HistoryQuery(requirements=parse_expr('Owner == "alice"')), files) == [1]
    assert clusters(HistoryQuery(requirements=parse_expr("NoSuch + 1")), files) == []
    assert clusters(HistoryQuery(ad_types=frozenset({"ALL"})), files) == [4, 3, 1]


def test_a_projection_brings_the_attributes_its_expressions_refer_to(tmp_path: Path) -> None:
    path = tmp_path / "startd_history"
    path.write_text(RECORDS)
    oldest = next(HistoryScan(HistoryQuery(forwards=True)).records([str(path)]))
    assert projected(oldest, ("weight", "Missing")) == {"ClusterId": "1",
                                                        "weight": "ClusterId * 2"}
    assert projected(oldest, ()) == {"ClusterId": "1", "Owner": '"alice"',
                                     "Weight": "ClusterId * 2"}
    # a string holding a newline: still one attribute each
    (tmp_path / "lines").write_text('Text = "a\\nb"\n*** Offset = 0\n')
    ad = next(HistoryScan(HistoryQuery()).records([str(tmp_path / "lines")]))
    ad["Text"] = "a\nb"
    assert projected(ad, ()) == {"Text": '"a\nb"'}


@pytest.mark.parametrize(("config", "query", "code"), [
    ("HISTORY_HELPER_MAX_CONCURRENCY = 0\n", {}, 10),
    ("", {"Projection": "5"}, 3),
    ("", {"HistoryRecordSource": '"DAEMON"'}, 6),
    ("STARTD_HISTORY =\n", {}, 5),
])  # fmt: skip
def test_refused_queries_get_condor_startds_error_codes(config: str, query: dict[str, str],
                                                        code: int) -> None:  # fmt: skip
    ad = to_classad({"HistoryRecordSource": '"STARTD"', **query})
    with pytest.raises(HistoryError) as refused:
        history_query(ad, settings(config))
    assert refused.value.code == code


def test_a_query_is_read_from_the_knobs_file_with_its_limits() -> None:
    ad = to_classad({"HistoryRecordSource": '"STARTD"', "NumJobMatches": "3",
                     "Since": "7", "Projection": '"ClusterId, Owner"'})  # fmt: skip
    query, path = history_query(ad, settings("LOG = /var/log/execd\n"
                                             "HISTORY_HELPER_MAX_HISTORY = 10\n"))  # fmt: skip
    assert path == "/var/log/execd/startd_history"
    assert (query.match_limit, query.scan_limit, query.projection) == (3, 10,
                                                                       ("ClusterId", "Owner"))
    assert query.since is not None  # a literal Since is a job id: ClusterId == 7
    with pytest.raises(NoAnswer):  # condor_history refuses -forwards with -since
        history_query(to_classad({"HistoryRecordSource": '"STARTD"', "Since": "true == x",
                                  "HistoryReadForwards": "true"}), settings(""))  # fmt: skip


def test_get_history_is_a_read_command() -> None:
    assert within_limits(Command.GET_HISTORY, frozenset({"READ"}))
    assert not within_limits(Command.GET_HISTORY, frozenset())
