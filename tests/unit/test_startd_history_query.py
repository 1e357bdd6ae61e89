"""Reading STARTD_HISTORY for GET_HISTORY (execd/daemon/startd_history_query.py,
execd/daemon/pool_history.py) as condor_startd's `condor_history -inherit` child reads it.
The pool tier compares the same files through condor_history against condor_startd
(tests/pool/test_pool_remote_history.py); these pin the rules found in its source."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from execd.classads import parse_expr
from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.pool_commands import PoolCommands
from execd.daemon.pool_history import HistoryError, NoAnswer, history_query
from execd.daemon.pool_settings import pool_settings
from execd.daemon.startd_history_query import HistoryQuery, HistoryScan, history_files, projected
from execd.wire.classad_codec import encode_ad, to_classad
from execd.wire.commands import Command, within_limits
from execd.wire.encoding import Encoder
from execd.wire.server import Peer

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
    with pytest.raises(NoAnswer):  # condor_history refuses -forwards with -since
        history_query(to_classad({"HistoryRecordSource": '"STARTD"', "Since": "true == x",
                                  "HistoryReadForwards": "true"}), settings(""))  # fmt: skip


def since_query(since: str) -> HistoryQuery:
    ad = to_classad({"HistoryRecordSource": '"STARTD"', "Since": since})
    return history_query(ad, settings(""))[0]


def test_since_is_a_job_id_when_literal_and_an_expression_otherwise(tmp_path: Path) -> None:
    """As condor_history's -since reads the text condor_startd gives it: a literal
    (ExprTreeIsLiteral, which looks inside parentheses) must be a job id."""
    path = tmp_path / "startd_history"
    path.write_text("".join(f"ClusterId = {n}\nProcId = {n % 2}\n*** Offset = 0\n"
                            for n in range(1, 10)))  # fmt: skip
    files = [str(path)]
    assert clusters(since_query("7"), files) == [9, 8]  # stops at ClusterId == 7
    assert clusters(since_query("7.1"), files) == [9, 8]
    assert clusters(since_query("7.0"), files) == [9, 8, 7, 6, 5, 4, 3, 2, 1]  # 7.0: no such job
    assert clusters(since_query("ClusterId < 5"), files) == [9, 8, 7, 6, 5]
    # a reference is an expression (evaluated in each ad: undefined, never stops)
    assert clusters(since_query("e"), files) == [9, 8, 7, 6, 5, 4, 3, 2, 1]
    for literal in ("(7)", "((7))", '"7"', "true"):
        with pytest.raises(NoAnswer):
            since_query(literal)


def test_queries_condor_startds_child_ends_without_an_answer(tmp_path: Path) -> None:
    """`-type -x` is a missing argument to condor_history; `-dir` with no directory."""
    with pytest.raises(NoAnswer):
        history_query(to_classad({"HistoryRecordSource": '"STARTD"',
                                  "HistoryAdTypeFilter": '"-JOB"'}), settings(""))  # fmt: skip
    (tmp_path / "file").write_text("")
    for named in (tmp_path / "file", tmp_path / "none"):
        with pytest.raises(NoAnswer):
            history_query(to_classad({"HistoryRecordSource": '"STARTD"',
                                      "HistoryFromDir": "true"}),
                          settings(f"STARTD_HISTORY_DIR = {named}\n"))  # fmt: skip
    _query, path = history_query(to_classad({"HistoryRecordSource": '"STARTD"',
                                            "HistoryFromDir": "true"}),
                                settings(f"STARTD_HISTORY_DIR = {tmp_path}\n"))  # fmt: skip
    assert path == ""  # a directory: an empty answer, as condor_startd's


def test_a_long_line_is_read_backwards_in_linear_time_giving_turns(tmp_path: Path) -> None:
    """20 MB without a newline (NULs after a crash): the reader says after each chunk
    that it has nothing yet (the loop gets a turn) and reads on to the records before."""
    path = tmp_path / "startd_history"
    with path.open("wb") as file:
        file.write(b"ClusterId = 1\n*** Offset = 0\n")
        file.write(b"\0" * 20_000_000)
        file.write(b"\n*** Offset = 1\n")
    scan = HistoryScan(HistoryQuery())
    started = time.monotonic()
    items = list(scan.records([str(path)]))
    took = time.monotonic() - started
    assert [ad["ClusterId"] for ad in items if ad is not None] == [1]
    assert items.count(None) >= 20_000_000 // (64 * 1024)
    assert took < 1.0, took  # quadratic, it took 1.9 s


def test_get_history_is_a_read_command() -> None:
    """A token scoped to READ may ask, and so may any authenticated peer that is neither
    an administrator nor a scheduler (PoolCommands.authorize, HTCondor's ALLOW_READ)."""
    assert within_limits(Command.GET_HISTORY, frozenset({"READ"}))
    assert not within_limits(Command.GET_HISTORY, frozenset())
    config = pool_settings(settings("COLLECTOR_HOST = 127.0.0.1:9618\n"
                                    "EXECD_POOL_ADMINISTRATORS = admin@*\n"
                                    "EXECD_POOL_SCHEDULERS = condor@*\n"))  # fmt: skip
    # what authorize reads: the pool config, and no job owner sessions
    commands = SimpleNamespace(member=SimpleNamespace(config=config), owners=None)
    reader = Peer(user="someone@pool", method="FS", sid="s", address="127.0.0.1:1")
    assert PoolCommands.judge(commands, Command.GET_HISTORY, reader)
    assert not PoolCommands.judge(commands, Command.DRAIN_JOBS, reader)


def test_any_text_before_the_equals_sign_is_a_name_as_classad_insert_reads_it(
        tmp_path: Path) -> None:  # fmt: skip
    path = tmp_path / "startd_history"
    path.write_text('ClusterId = 1\nMy Attr = 1 + 1\n  Two  = 2\n*** Offset = 0\n'
                    "ClusterId = 2\n'Quoted' = 1\n*** Offset = 1\n")  # fmt: skip
    ads = [ad for ad in HistoryScan(HistoryQuery()).records([str(path)]) if ad is not None]
    assert [projected(ad, ()) for ad in ads] == [  # a quoted name spoils its record
        {"ClusterId": "1", "My Attr": "1 + 1", "Two": "2"}]
    enc = encode_ad(Encoder(), projected(ads[0], ()), names_as_read=True)
    assert b"My Attr = 1 + 1\0" in enc.payload()  # sent as putClassAd sends it


def test_a_constraint_whose_value_python_cannot_decode_matches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "startd_history"
    path.write_text(RECORDS)
    assert clusters(HistoryQuery(requirements=parse_expr('"\\377"')), [str(path)]) == []
