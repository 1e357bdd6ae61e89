"""Job hook decisions (seed 003): keyword choice, PREPARE_JOB outcomes, update timing."""

from __future__ import annotations

import pytest

from execd.hooks.job_hooks import (
    HookResult,
    job_exit_argument,
    next_update_time,
    parse_hook_output,
    prepare_job_outcome,
    select_keyword,
)


def test_keyword_selection_order() -> None:
    have = {"JAVA5", "DEFAULT"}
    assert select_keyword("JAVA5", "DEFAULT", None, have) == "JAVA5"
    assert select_keyword("NOPE", "DEFAULT", None, have) == "DEFAULT"
    assert select_keyword(None, None, None, have) is None
    assert select_keyword("JAVA5", "DEFAULT", "FORCED", have) == "FORCED"


def test_prepare_job_edits_the_ad_on_success() -> None:
    out = prepare_job_outcome(HookResult(0, 'Cmd = "/usr/bin/java"\nFoo = 3\n', ""))
    assert out.action == "run"
    assert out.edits == {"Cmd": '"/usr/bin/java"', "Foo": "3"}


@pytest.mark.parametrize(
    ("status", "stdout", "action", "code"),
    [
        (0, 'HookStatusCode = 12\nHookStatusMessage = "no java"\n', "hold", 12),
        (0, "HookStatusCode = 299\n", "hold", 299),
        (1, "HookStatusCode = 300\n", "idle", 300),
        (5, "", "hold", 5),
        (7, "HookStatusCode = -1\n", "hold", 7),  # negative: the exit status stands
        (0, "HookStatusCode = 0\n", "run", 0),
    ],
)
def test_hook_status_code_ranges(status: int, stdout: str, action: str, code: int) -> None:
    out = prepare_job_outcome(HookResult(status, stdout, ""))
    assert (out.action, out.code) == (action, code)


def test_hold_reason_is_the_hook_status_message() -> None:
    out = prepare_job_outcome(
        HookResult(0, 'HookStatusCode = 12\nHookStatusMessage = "no java"', "")
    )
    assert out.message == "no java"


def test_a_hook_killed_by_a_signal_holds_whatever_it_printed() -> None:
    out = prepare_job_outcome(HookResult(-9, "HookStatusCode = 0\n", ""))
    assert out.action == "hold"


def test_garbage_output_names_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_hook_output("A = 1\nthis is not an attribute\n")
    assert prepare_job_outcome(HookResult(0, "junk\n", "")).action == "hold"


def test_update_job_info_timing_and_exit_arguments() -> None:
    assert next_update_time(100.0, None, 8, 300) == 108.0
    assert next_update_time(100.0, 108.0, 8, 300) == 408.0
    assert job_exit_argument("evict") == "evict"
    with pytest.raises(ValueError, match="vacate"):
        job_exit_argument("vacate")
