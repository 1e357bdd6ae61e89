"""STARTD_CRON_* knobs -> CronJobSpec; bad values are ConfigErrors naming knob and line."""

from __future__ import annotations

import pytest

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.errors import ConfigError
from execd.hooks.cron_config import CronMode, cron_settings, parse_env, parse_period


def cron(text: str):  # type: ignore[no-untyped-def]
    return cron_settings(load_settings(parse_config_text(text, filename="execd.conf", env={})))


def test_defaults_with_no_jobs() -> None:
    s = cron("")
    assert s.jobs == () and s.max_job_load == 0.1
    assert s.autopublish == "never" and s.log_non_zero_exit is False


def test_every_per_job_knob() -> None:
    s = cron(
        "STARTD_CRON_JOBLIST = TEST, OTHER\n"
        "STARTD_CRON_TEST_EXECUTABLE = /usr/bin/test-hook\n"
        "STARTD_CRON_TEST_MODE = waitforexit\n"
        "STARTD_CRON_TEST_PERIOD = 5m\n"
        "STARTD_CRON_TEST_ARGS = -a 'two words'\n"
        'STARTD_CRON_TEST_ENV = "A=1 B=x"\n'
        "STARTD_CRON_TEST_CWD = /tmp\n"
        "STARTD_CRON_TEST_PREFIX = test_\n"
        "STARTD_CRON_TEST_KILL = true\n"
        "STARTD_CRON_TEST_RECONFIG = true\n"
        "STARTD_CRON_TEST_RECONFIG_RERUN = true\n"
        "STARTD_CRON_TEST_JOB_LOAD = 0.5\n"
        "STARTD_CRON_TEST_CONDITION = TotalCpus > 1\n"
        "STARTD_CRON_TEST_SLOTS = 1, 3\n"
        "STARTD_CRON_TEST_METRICS = SUM:GPUs, PEAK:GPUsMemory\n"
        "STARTD_CRON_OTHER_EXECUTABLE = /bin/true\n"
        "STARTD_CRON_OTHER_PERIOD = 30\n"
        "STARTD_CRON_MAX_JOB_LOAD = 2\n"
        "STARTD_CRON_AUTOPUBLISH = If_Changed\n"
        "STARTD_CRON_LOG_NON_ZERO_EXIT = True\n"
    )
    test, other = s.jobs
    assert test.mode is CronMode.WAIT_FOR_EXIT and test.period == 300
    assert test.args == ("-a", "two words") and dict(test.env) == {"A": "1", "B": "x"}
    assert (test.cwd, test.prefix, test.kill, test.reconfig, test.reconfig_rerun) == (
        "/tmp", "test_", True, True, True)
    assert test.job_load == 0.5 and test.condition == "TotalCpus > 1"
    assert test.slots == (1, 3) and test.metrics == (("SUM", "GPUs"), ("PEAK", "GPUsMemory"))
    assert other.mode is CronMode.PERIODIC and other.period == 30 and other.job_load == 0.01
    assert (s.max_job_load, s.autopublish, s.log_non_zero_exit) == (2.0, "if_changed", True)


def test_gpus_monitor_metaknob_gives_a_cron_job() -> None:
    s = cron("use feature : GPUsMonitor\n")
    (job,) = s.jobs
    assert job.name == "GPUs_MONITOR" and job.mode is CronMode.WAIT_FOR_EXIT
    assert job.period == 300 and job.metrics == (("SUM", "GPUs"), ("PEAK", "GPUsMemory"))


@pytest.mark.parametrize(
    ("text", "knob"),
    [
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_PERIOD = 1\n", "STARTD_CRON_X_EXECUTABLE"),
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_EXECUTABLE = /bin/true\n", "STARTD_CRON_X_PERIOD"),
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_EXECUTABLE = /bin/true\n"
         "STARTD_CRON_X_PERIOD = 5 days\n", "STARTD_CRON_X_PERIOD"),
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_EXECUTABLE = /bin/true\n"
         "STARTD_CRON_X_MODE = Sometimes\n", "STARTD_CRON_X_MODE"),
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_EXECUTABLE = /bin/true\n"
         "STARTD_CRON_X_MODE = OneShot\nSTARTD_CRON_X_METRICS = AVG:GPUs\n",
         "STARTD_CRON_X_METRICS"),
        ("STARTD_CRON_JOBLIST = X\nSTARTD_CRON_X_EXECUTABLE = /bin/true\n"
         "STARTD_CRON_X_MODE = OneShot\nSTARTD_CRON_X_SLOTS = one\n", "STARTD_CRON_X_SLOTS"),
        ("STARTD_CRON_AUTOPUBLISH = sometimes\n", "STARTD_CRON_AUTOPUBLISH"),
    ],
)
def test_bad_values_name_the_knob(text: str, knob: str) -> None:
    with pytest.raises(ConfigError) as info:
        cron(text)
    assert knob in str(info.value)


def test_bad_condition_is_caught_when_loading() -> None:
    with pytest.raises(ConfigError) as info:
        cron("STARTD_CRON_X_CONDITION = (1 +\n")
    assert "STARTD_CRON_X_CONDITION" in str(info.value) and "execd.conf" in str(info.value)


def test_periods_and_environments() -> None:
    assert [parse_period(t) for t in ("30", "30s", "2m", "1h", "0.5")] == [30, 30, 120, 3600, 0.5]
    with pytest.raises(ValueError, match="period"):
        parse_period("-1")
    assert parse_env("A=1;B=2") == {"A": "1", "B": "2"}
    assert parse_env("\"A='x y' B=\"") == {"A": "x y", "B": ""}
    with pytest.raises(ValueError, match="NAME=value"):
        parse_env("JUSTNAME")
