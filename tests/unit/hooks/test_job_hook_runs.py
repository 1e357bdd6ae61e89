"""Job hooks in the daemon: keyword choice, ad edits, the attributes the hooks are given."""

from __future__ import annotations

import json
from pathlib import Path

from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.hooks.job_hook_runs import (
    ad_text,
    apply_edits,
    exit_argument,
    exit_attributes,
    job_hook_config,
    status_attributes,
)


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


HOOKS = ("A_HOOK_PREPARE_JOB = /a/prepare\nA_HOOK_JOB_EXIT = /a/exit\n"
         "B_HOOK_UPDATE_JOB_INFO = /b/update\n")


def test_keyword_order_forced_then_job_then_default() -> None:
    s = settings(HOOKS + "STARTER_DEFAULT_JOB_HOOK_KEYWORD = B\n")
    job = job_hook_config(s, "A")
    assert job is not None and job.keyword == "A"
    assert job.paths == {"PREPARE_JOB": "/a/prepare", "JOB_EXIT": "/a/exit"}
    default = job_hook_config(s, "UNKNOWN")  # no hook for the job's keyword: the default
    assert default is not None and default.keyword == "B"
    assert (default.initial_update, default.update_interval) == (8.0, 300.0)
    forced = job_hook_config(settings(HOOKS + "STARTER_JOB_HOOK_KEYWORD = B\n"), "A")
    assert forced is not None and forced.keyword == "B"
    assert job_hook_config(settings(HOOKS), None) is None


def test_per_hook_timeout_and_update_intervals() -> None:
    s = settings(HOOKS + "A_HOOK_PREPARE_JOB_TIMEOUT = 7\nSTARTER_UPDATE_INTERVAL = 60\n"
                 "STARTER_INITIAL_UPDATE_INTERVAL = 2\n")
    config = job_hook_config(s, "A")
    assert config is not None
    assert config.timeouts == {"PREPARE_JOB": 7.0, "JOB_EXIT": 120.0}
    assert (config.initial_update, config.update_interval) == (2.0, 60.0)


def test_exit_argument() -> None:
    assert exit_argument({"ExitReason": "exited", "ExitCode": 0}) == "exit"
    assert exit_argument({"ExitReason": "held", "HoldReasonCode": 34}) == "hold"
    assert exit_argument({"ExitReason": "soft_killed"}) == "evict"
    # the daemon killed it, even if the starter left no report saying so
    assert exit_argument({"ExitReason": "no_report"}, evicted=True) == "evict"


def test_edits_go_into_the_ad_as_values() -> None:
    ad = {"Cmd": "/bin/old"}
    bad = apply_edits(ad, {"Cmd": '"/usr/java/bin/java"', "Prio": "3 + 4", "X": "[[["})
    assert ad == {"Cmd": "/usr/java/bin/java", "Prio": 7}
    assert bad == ["X"]


def test_the_ads_the_hooks_read(tmp_path: Path) -> None:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"JobState": "Suspended", "JobPid": 42, "NumProcesses": 3,
                                  "RemoteUserCpu": 2.7, "RemoteSysCpu": 0.5, "ImageSize": 9,
                                  "ResidentSetSize": 8}))
    attrs = status_attributes(str(status), 1_700_000_000.9)
    # CPU in whole seconds, truncated, as condor_starter's update ad (its hooks read it)
    assert attrs == {"JobStartDate": 1_700_000_000, "JobState": "Suspended", "JobPid": 42,
                     "NumPids": 3, "RemoteUserCpu": 2.0, "RemoteSysCpu": 0.0, "ImageSize": 9,
                     "ResidentSetSize": 8}
    assert status_attributes(str(tmp_path / "none"), 5)["JobState"] == "Running"
    signalled = exit_attributes({"ExitBySignal": True, "ExitSignal": 9}, 2.5)
    assert signalled == {"ExitReason": "exited", "ExitBySignal": True, "JobDuration": 2.5,
                         "ExitSignal": 9}
    text = ad_text({"Cmd": "/bin/cat", "Args": "a b", "N": 3})
    assert 'Cmd = "/bin/cat"' in text.splitlines() and "N = 3" in text.splitlines()
