"""Fetch-work decisions: keywords, the fetched job ad's attributes, FetchWorkDelay."""

from __future__ import annotations

import pytest

from execd.classads import new_ad
from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.hooks.fetch_work import (
    FetchedJobError,
    fetch_hooks,
    fetch_work_delay,
    fetched_job,
    two_ads,
)


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def test_slot_keyword_wins_over_the_startd_keyword() -> None:
    s = settings("STARTD_JOB_HOOK_KEYWORD = DB\nSLOT4_JOB_HOOK_KEYWORD = WEB\n"
                 "DB_HOOK_FETCH_WORK = /hooks/db_fetch\nDB_HOOK_REPLY_FETCH = /hooks/db_reply\n"
                 "WEB_HOOK_FETCH_WORK = /hooks/web_fetch\n")
    db = fetch_hooks(s, "slot1")
    assert db is not None and (db.keyword, db.fetch_work, db.reply_fetch) == (
        "DB", "/hooks/db_fetch", "/hooks/db_reply")
    web = fetch_hooks(s, "slot4")
    assert web is not None and (web.keyword, web.reply_fetch, web.evict_claim) == (
        "WEB", None, None)
    d_slot = fetch_hooks(s, "slot4_2")  # a d-slot fetches with its parent's keyword
    assert d_slot is not None and d_slot.keyword == "WEB"


def test_no_fetch_work_hook_means_no_fetching() -> None:
    assert fetch_hooks(settings("NUM_CPUS = 1\n"), "slot1") is None
    # REPLY_FETCH alone does nothing: FETCH_WORK must be defined for the others to operate
    only_reply = settings("STARTD_JOB_HOOK_KEYWORD = X\nX_HOOK_REPLY_FETCH = /r\n")
    assert fetch_hooks(only_reply, "slot1") is None


def test_fetch_work_delay_is_an_expression_defaulting_to_300() -> None:
    idle = new_ad({"State": "Claimed", "Activity": "Idle"})
    busy = new_ad({"State": "Claimed", "Activity": "Busy"})
    expr = 'ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)'
    assert fetch_work_delay(expr, idle, None) == 0
    assert fetch_work_delay(expr, busy, None) == 300
    assert fetch_work_delay(None, idle, None) == 300
    assert fetch_work_delay("MY.NoSuchThing", idle, None) == 300
    # the running job's ad is the target
    assert fetch_work_delay("TARGET.Pause", busy, new_ad({"Pause": 42})) == 42


GOOD = 'Cmd = "prog"\nOwner = "nobody"\nIwd = "/work"\nOut = "/abs/out"\nErr = "err"\n'


def test_a_good_job_gets_hook_keyword_and_paths_under_iwd() -> None:
    job = fetched_job(GOOD, keyword="DB", partitionable=False, as_root=True)
    assert job["HookKeyword"] == "DB"
    assert job["Cmd"] == "/work/prog"
    assert job["Out"] == "/abs/out" and job["Err"] == "/work/err"
    assert job["JobUniverse"] == 5


@pytest.mark.parametrize(("text", "problem"), [
    ('Owner = "nobody"\n', "Cmd is required"),
    ('Cmd = "/bin/true"\n', "Owner is required when execd runs as root"),
    ('Cmd = "/bin/true"\nOwner = "no-such-user-here"\n', "is not a user on this machine"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nJobUniverse = 7\n', "JobUniverse must be 5"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nIwd = "rel"\n', "Iwd must be a full path"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nEnv = 3\n', "Env must be a string"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nKillSig = 1.5\n', "KillSig must be"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nStarterUserLogUseXML = "yes"\n',
     "StarterUserLogUseXML must be a boolean"),
])
def test_bad_jobs_are_refused_naming_the_attribute(text: str, problem: str) -> None:
    with pytest.raises(FetchedJobError, match=problem):
        fetched_job(text, keyword="DB", partitionable=False, as_root=True)


def test_owner_is_optional_when_not_root_and_requests_needed_on_p_slots() -> None:
    assert fetched_job('Cmd = "/bin/true"\n', keyword="K", partitionable=False,
                       as_root=False)["Cmd"] == "/bin/true"
    with pytest.raises(FetchedJobError, match="RequestMemory is required"):
        fetched_job('Cmd = "/bin/true"\nRequestCpus = 1\nRequestDisk = 10\n', keyword="K",
                    partitionable=True, as_root=False)


def test_reply_and_evict_stdin_is_job_dashes_slot() -> None:
    assert two_ads("A = 1", "B = 2\n") == b"A = 1\n-----\nB = 2\n"
