"""The state store: what a new daemon reads back, and what it must never show."""

from __future__ import annotations

import re
import sqlite3
import stat
from pathlib import Path

import pytest

from execd.daemon.store import ClaimRecord, JobRecord, Store, StoreError
from execd.daemon.store_schema import SCHEMA

SECRET = "ab" * 32


def claim(session: str = "<n>#1#1") -> ClaimRecord:
    return ClaimRecord(session, f"{session}#[]{SECRET}", "slot1_1", parent="slot1",
                       carved={"sub_id": 1, "cpus": 1.0}, request_ad={"RequestCpus": 1},
                       lease_duration=1200.0, granted=1.0)


def schema_before(version: int) -> str:
    """The tables as execd with schema `version` made them."""
    older = re.sub(r"TEXT,(\s+-- JSON \[reason, code[^\n]*)\n\s+preemption_badput [^\n]*\n",
                   r"TEXT\1\n", SCHEMA)
    assert "preemption_badput" not in older
    if version == 5:
        return older
    older = re.sub(r"REAL,(\s+-- wall time of the last ALIVE[^\n]*)\n\s+preempting [^\n]*\n",
                   r"REAL\1\n", older)
    assert "preempting" not in older
    if version == 4:
        return older
    older = re.sub(r"TEXT,(\s+-- NULL, or 'vacating'[^\n]*)\n\s+vacate_reason TEXT[^\n]*\n",
                   r"TEXT\1\n", older)
    assert "vacate_reason" not in older
    if version == 3:
        return older
    older = re.sub(r"granted REAL NOT NULL,(\s+-- wall time)\n\s+renewed REAL[^\n]*\n",
                   r"granted REAL NOT NULL\1\n", older)
    assert "renewed" not in older
    if version == 1:  # and no jobs.evicting
        older = re.sub(r"TEXT,(\s+-- NULL, or who suspended[^\n]*)\n\s+evicting TEXT[^\n]*\n",
                       r"TEXT\1\n", older)
        assert "evicting" not in older
    return older


def write_old_store(path: Path, schema: str, version: int, *inserts: str) -> None:
    """A state file as an older execd left it: its tables, its version, its rows."""
    db = sqlite3.connect(path)
    db.executescript(schema)
    db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(version),))
    for insert in inserts:
        db.execute(insert)
    db.commit()
    db.close()


def job(job_id: str, session: str = "<n>#1#1") -> JobRecord:
    return JobRecord(job_id, "slot1_1", session, {"Cmd": "/bin/true"}, {"report_path": "/r"},
                     4242, 99, "/sys/fs/cgroup/x/slot1_1.slice", "/execute/dir_4242", 5.0)


def test_what_is_written_is_read_back_by_a_new_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_claim(claim())
    store.add_job(job("1.1"), sequence=("job", 7))
    store.set_drain("graceful", "maintenance", True)
    store.set_suspended("1.1", "command")
    store.set_broken("slot1_2", "1 process left", {"parent_id": 1, "sub_id": 2, "cpus": 1.0})
    store.set_broken("slot1", "slot1_2: 1 process left", None)
    store.db.close()  # no clean shutdown: as after kill -9

    again = Store(tmp_path / "state.db")
    assert again.claims() == [claim()]
    (record,) = again.jobs()
    assert (record.starter_pid, record.starter_start, record.suspended) == (4242, 99, "command")
    assert record.finished is None
    assert again.sequence("job") == 7
    assert again.drain() == ("graceful", "maintenance", True)
    assert again.broken() == [
        ("slot1", "slot1_2: 1 process left", None),
        ("slot1_2", "1 process left", {"parent_id": 1, "sub_id": 2, "cpus": 1.0})]


def test_the_file_is_private_and_a_claim_record_does_not_show_its_secret(tmp_path: Path) -> None:
    Store(tmp_path / "state.db")
    assert stat.S_IMODE((tmp_path / "state.db").stat().st_mode) == 0o600
    assert SECRET not in repr(claim())
    assert SECRET not in str(claim())


def test_removing_a_claim_drops_its_finished_jobs_not_its_running_ones(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    store.add_claim(claim())
    store.add_job(job("1.1"))
    store.add_job(job("1.2"))
    store.finish_job("1.1", 9.0, {"ExitCode": 0}, None)
    store.remove_claim("<n>#1#1")
    assert store.claims() == []
    assert [j.job_id for j in store.jobs()] == ["1.2"]
    store.finish_job("1.2", 9.0, {"ExitCode": 3}, "held")
    (done,) = store.jobs()
    assert (done.report, done.hold_reason) == ({"ExitCode": 3}, "held")
    store.remove_job("1.2")
    store.clear_drain()
    assert store.jobs() == [] and store.drain() is None


def test_a_store_from_another_schema_is_refused_naming_both(tmp_path: Path) -> None:
    Store(tmp_path / "state.db").close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema 99, execd knows 6"):
        Store(tmp_path / "state.db")


def test_a_store_of_schema_1_gains_the_eviction_column_and_keeps_its_jobs(
        tmp_path: Path) -> None:
    # the tables as execd with schema 1 made them: no jobs.evicting
    write_old_store(tmp_path / "state.db", schema_before(1), 1,
                    "INSERT INTO jobs VALUES ('1.1','slot1_1','s','{}','{}',1,2,'c','d',5.0,"
                    "NULL,NULL,NULL,NULL)")
    again = Store(tmp_path / "state.db")
    (record,) = again.jobs()
    assert (record.job_id, record.evicting) == ("1.1", None)
    again.set_evicting("1.1", "vacating")
    again.close()
    assert Store(tmp_path / "state.db").jobs()[0].evicting == "vacating"


def test_a_store_made_before_broken_slots_were_kept_gains_their_table(tmp_path: Path) -> None:
    older = re.sub(r"CREATE TABLE IF NOT EXISTS broken \(.*?\);\n", "", schema_before(2),
                   flags=re.S)
    assert "broken" not in older
    write_old_store(tmp_path / "state.db", older, 2)
    again = Store(tmp_path / "state.db")
    assert again.broken() == []
    again.set_broken("slot2", "stuck", None)
    again.remove_broken("slot2")
    assert again.broken() == []


def test_a_claims_lease_runs_from_its_last_alive_across_stores_and_from_schema_2(
        tmp_path: Path) -> None:
    """A new daemon counts a claim's lease from the last ALIVE the old one recorded
    (from the grant when there was none); a schema-2 file gains the column."""
    write_old_store(tmp_path / "state.db", schema_before(2), 2,
                    "INSERT INTO claims VALUES ('<n>#1#1','<n>#1#1#[]x','slot1',NULL,NULL,"
                    "'{}',1200.0,1.0)")
    store = Store(tmp_path / "state.db")
    (old,) = store.claims()
    assert (old.renewed, old.last_renewed) == (None, 1.0)
    store.renew_claim("<n>#1#1", 50.0)
    store.add_claim(claim("<n>#1#2"))
    store.db.close()  # as after kill -9
    again = Store(tmp_path / "state.db")
    assert [(c.session_id, c.last_renewed) for c in again.claims()] == [
        ("<n>#1#1", 50.0), ("<n>#1#2", 1.0)]


def test_a_jobs_vacate_reason_is_read_back_and_a_schema_3_file_gains_the_column(
        tmp_path: Path) -> None:  # fmt: skip
    """Why the startd evicts a job (its shadow's 004) outlives the daemon; a job of an
    older file has none."""
    write_old_store(tmp_path / "state.db", schema_before(3), 3,
                    "INSERT INTO jobs VALUES ('1.1','slot1_1','s','{}','{}',1,2,'c','d',5.0,"
                    "NULL,NULL,NULL,NULL,'killing')")
    store = Store(tmp_path / "state.db")
    assert [(j.job_id, j.evicting, j.vacate_reason) for j in store.jobs()] == [
        ("1.1", "killing", None)]
    store.set_evicting("1.1", "killing", ("Preempted for a Priority user", 1019, 0))
    store.add_job(job("1.2"))
    store.db.close()  # as after kill -9
    again = Store(tmp_path / "state.db")
    assert [(j.job_id, j.vacate_reason) for j in again.jobs()] == [
        ("1.1", ("Preempted for a Priority user", 1019, 0)), ("1.2", None)]


def test_a_jobs_preemption_badput_is_read_back_and_a_schema_5_file_gains_the_column(
        tmp_path: Path) -> None:  # fmt: skip
    """The claim's BadputCausedByPreemption, as the policy decided it at the eviction or
    the job's end, outlives the daemon (a resumed eviction does not decide it again); a
    job of an older file has none."""
    write_old_store(tmp_path / "state.db", schema_before(5), 5,
                    "INSERT INTO jobs VALUES ('1.1','slot1_1','s','{}','{}',1,2,'c','d',5.0,"
                    "NULL,NULL,NULL,NULL,'killing',NULL)")
    store = Store(tmp_path / "state.db")
    assert [(j.job_id, j.preemption_badput) for j in store.jobs()] == [("1.1", False)]
    store.set_evicting("1.1", "killing", None, preemption_badput=True)
    store.add_job(job("1.2"))
    store.add_job(job("1.3"))
    store.finish_job("1.3", 9.0, {}, None, preemption_badput=True)
    store.db.close()  # as after kill -9
    again = Store(tmp_path / "state.db")
    assert [(j.job_id, j.preemption_badput) for j in again.jobs()] == [
        ("1.1", True), ("1.2", False), ("1.3", True)]


def test_a_waiting_preempting_claim_is_flagged_until_it_takes_the_slot_and_from_schema_4(
        tmp_path: Path) -> None:  # fmt: skip
    """Whether a claim waits for its slot is read back, not guessed from the order of
    the grants; a claim of a schema-4 file is the slot's own."""
    write_old_store(tmp_path / "state.db", schema_before(4), 4,
                    "INSERT INTO claims VALUES ('<n>#1#1','<n>#1#1#[]x','slot1',NULL,NULL,"
                    "'{}',1200.0,9.0,NULL)")
    store = Store(tmp_path / "state.db")
    store.add_claim(ClaimRecord("<n>#1#2", "<n>#1#2#[]y", "slot1", request_ad={},
                                lease_duration=60.0, granted=5.0, preempting=True))
    store.db.close()  # as after kill -9
    again = Store(tmp_path / "state.db")
    assert [(c.session_id, c.preempting) for c in again.claims()] == [
        ("<n>#1#2", True), ("<n>#1#1", False)]
    again.remove_claim("<n>#1#1")
    again.claim_took_slot("<n>#1#2", 20.0)
    assert [(c.preempting, c.last_renewed) for c in again.claims()] == [(False, 20.0)]


def test_a_schema_4_files_waiting_claim_is_the_one_of_its_slot_that_ran_no_job(
        tmp_path: Path) -> None:  # fmt: skip
    """Two claims of slot1 in a schema-4 file (no flag): the one whose session has a job
    is the slot's own, the other the waiting preempting claim, whatever their grants'
    order (alice's running job's claim, granted later by a stepped-back clock, was read as
    the waiting one and dropped); another slot's lone claim is its own."""
    write_old_store(tmp_path / "state.db", schema_before(4), 4,
                    "INSERT INTO claims VALUES ('<n>#1#1','<n>#1#1#[]x','slot1',NULL,NULL,"
                    "'{}',1200.0,9.0,NULL)",
                    "INSERT INTO claims VALUES ('<n>#1#2','<n>#1#2#[]y','slot1',NULL,NULL,"
                    "'{}',60.0,5.0,NULL)",
                    "INSERT INTO claims VALUES ('<n>#1#3','<n>#1#3#[]z','slot2',NULL,NULL,"
                    "'{}',60.0,7.0,NULL)",
                    "INSERT INTO jobs VALUES ('1.1','slot1','<n>#1#1','{}','{}',1,2,'c','d',"
                    "5.0,NULL,NULL,NULL,NULL,NULL,NULL)")
    store = Store(tmp_path / "state.db")
    assert {c.session_id: c.preempting for c in store.claims()} == {
        "<n>#1#1": False, "<n>#1#2": True, "<n>#1#3": False}


def test_an_unwritable_store_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.db").mkdir()
    with pytest.raises(StoreError, match="cannot open the state store"):
        Store(tmp_path / "state.db")


def test_a_pool_claims_schedd_conversation_and_connection_survive_a_new_store(
        tmp_path: Path) -> None:  # fmt: skip
    """What a restart in place needs of a pool claim is read back; a second
    set_pool_claim (the schedd moved) keeps the conversation; the handed-over
    connection (a secret) is not in the record's repr."""
    store = Store(tmp_path / "state.db")
    store.set_pool_claim("<n>#1#1", "<schedd1>", 1200)
    store.set_conversation("<n>#1#1", {"global_job_id": "vm#1.0#1"})
    store.set_connection("<n>#1#1", {"fd": 9, "key": SECRET})
    store.set_pool_claim("<n>#1#1", "<schedd2>", 1200)
    store.set_pool_claim("<n>#1#2", "<schedd1>", 60)
    store.set_meta("pool_listen_port", "9618")
    store.db.close()

    again = Store(tmp_path / "state.db")
    first, second = again.pool_claims()
    assert (first.session_id, first.schedd, first.lease_s) == ("<n>#1#1", "<schedd2>", 1200)
    assert first.conversation == {"global_job_id": "vm#1.0#1"}
    assert first.connection == {"fd": 9, "key": SECRET} and SECRET not in repr(first)
    assert (second.conversation, second.connection) == (None, None)
    assert again.meta("pool_listen_port") == "9618" and again.meta("nothing") is None
    again.set_connection("<n>#1#1", None)
    again.remove_pool_claim("<n>#1#2")
    assert [(c.session_id, c.connection) for c in again.pool_claims()] == [("<n>#1#1", None)]
