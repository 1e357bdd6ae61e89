"""The STARTD_HISTORY file as condor_startd writes it (execd/daemon/startd_history.py), on
real files: the record's lines and banner, the banners' Offsets, rotation by size, day
and count, the per-job directory, HISTORY_CONTAINS_JOB_ENVIRONMENT, an empty
STARTD_HISTORY and a file that cannot be written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from execd import log
from execd.config.loader import load_config
from execd.config.settings import Settings
from execd.daemon.startd_history import StartdHistory, history_files

T0 = 1_800_000_000
JOB = {
    "ClusterId": "7", "ProcId": "0", "Owner": '"alice"', "CompletionDate": str(T0),
    "Cmd": '"/bin/true"', "Env": '"A=1"', "Environment": '"B=2"', "ClaimId": '"secret#x"',
    "TransferKey": '"key"', "GlobalJobId": '"ap#7.0#1"', "Args": '""', "JobStatus": "4",
    "MemoryUsage": "((ResidentSetSize + 1023) / 1024)",
}  # fmt: skip


def settings(tmp_path: Path, text: str = "") -> Settings:
    config = tmp_path / "execd_config"
    config.write_text(f"LOCAL_DIR = {tmp_path}\n{text}")
    (tmp_path / "log").mkdir(exist_ok=True)
    return Settings(load_config(config, env={}))


def day() -> str:
    return time.strftime("%Y%m%d", time.localtime())


def events(logfile: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in logfile.read_text().splitlines()]


def writer(tmp_path: Path, text: str = "") -> StartdHistory:
    current = settings(tmp_path, text)
    return StartdHistory(lambda: current)


def test_a_record_is_the_ad_in_fast_sort_order_without_secrets_then_its_banner(
        tmp_path: Path) -> None:  # fmt: skip
    before = int(time.time())
    assert writer(tmp_path).record(JOB, "7.0")
    lines = (tmp_path / "log" / "startd_history").read_text().splitlines()
    assert lines[:-1] == [
        "Cmd = \"/bin/true\"", "Env = \"A=1\"", "Args = \"\"", "Owner = \"alice\"",
        "ProcId = 0", "ClusterId = 7", "JobStatus = 4", "Environment = \"B=2\"",
        "GlobalJobId = \"ap#7.0#1\"", "MemoryUsage = ((ResidentSetSize + 1023) / 1024)",
        f"CompletionDate = {T0}",
    ]  # fmt: skip
    head, now = lines[-1].rsplit(" ", 1)
    assert head == (f'*** Offset = 0 ClusterId = 7 ProcId = 0 Owner = "alice" '
                    f"CompletionDate = {T0} CurrentTime =")  # fmt: skip
    assert before <= int(now) <= time.time()


def test_each_banner_says_where_the_previous_banner_starts(tmp_path: Path) -> None:
    history = writer(tmp_path)
    for n in range(3):
        assert history.record({**JOB, "ClusterId": str(n)}, f"{n}.0")
    data = (tmp_path / "log" / "startd_history").read_bytes()
    starts = [i for i in range(len(data)) if data.startswith(b"*** ", i)]
    offsets = [int(data[s:].split(b" ", 4)[3]) for s in starts]
    assert offsets == [0, starts[0], starts[1]]


def test_an_ad_without_ids_or_owner_gets_condors_placeholders(tmp_path: Path) -> None:
    history = writer(tmp_path)
    assert history.record({"Cmd": '"/bin/true"'}, "local.1")
    assert history.record({"Cmd": '"/bin/true"'}, "local.2")
    banners = (tmp_path / "log" / "startd_history").read_text().splitlines()[1::2]
    # after a file of under 200 bytes, findHistoryOffset's read comes up short: -1
    assert [b.split(" CurrentTime = ")[0] for b in banners] == [
        f'*** Offset = {n} ClusterId = -1 ProcId = -1 Owner = "?" CompletionDate = -1'
        for n in (0, -1)]  # fmt: skip


def test_the_environment_knob_leaves_env_out(tmp_path: Path) -> None:
    assert writer(tmp_path, "HISTORY_CONTAINS_JOB_ENVIRONMENT = false\n").record(JOB, "7.0")
    text = (tmp_path / "log" / "startd_history").read_text()
    assert "Env =" not in text and "Environment =" not in text and "Cmd =" in text


def test_the_file_rotates_before_a_record_would_pass_max_history_log(tmp_path: Path) -> None:
    history = writer(tmp_path, "MAX_HISTORY_LOG = 500\nMAX_HISTORY_ROTATIONS = 2\n")
    path = tmp_path / "log" / "startd_history"
    history.record(JOB, "1")
    assert history_files(history.settings()) == [path]
    days = {day()}  # the backup's name is the local date when it was made: one of these
    history.record(JOB, "2")  # ~300 + ~300 bytes > 500: the first goes to a backup
    days.add(day())
    backups = sorted(p.name for p in path.parent.iterdir() if p.name != path.name)
    assert len(backups) == 1 and backups[0][15:23] in days, backups
    assert backups[0].startswith("startd_history.") and backups[0][23] == "T", backups
    assert path.read_text().count("*** ") == 1
    # (a rotation within the same second would replace it, as HTCondor's rename does)
    (path.parent / backups[0]).rename(path.parent / "startd_history.20220101T000000")
    # older backups: only MAX_HISTORY_ROTATIONS are kept, the oldest removed first
    for name in ("startd_history.20200101T000000", "startd_history.20210101T000000"):
        (path.parent / name).write_text("old\n")
    days.add(day())
    history.record(JOB, "3")
    days.add(day())
    names = sorted(p.name for p in path.parent.iterdir())
    assert names[:2] == ["startd_history", "startd_history.20220101T000000"], names
    assert len(names) == 3 and names[2][15:23] in days, names
    files = history_files(history.settings())
    assert files[0] == path and files[1:] == sorted(files[1:], reverse=True)


def test_no_rotation_when_disabled(tmp_path: Path) -> None:
    history = writer(tmp_path, "MAX_HISTORY_LOG = 10\nENABLE_HISTORY_ROTATION = false\n")
    for n in range(3):
        history.record(JOB, str(n))
    assert [p.name for p in (tmp_path / "log").iterdir()] == ["startd_history"]
    assert (tmp_path / "log" / "startd_history").read_text().count("*** ") == 3


def test_daily_rotation_at_the_first_record_of_a_new_day(tmp_path: Path) -> None:
    history = writer(tmp_path, "ROTATE_HISTORY_DAILY = true\n")
    path = tmp_path / "log" / "startd_history"
    history.record(JOB, "1")
    history.record(JOB, "2")  # the same day: no rotation
    assert len(list(path.parent.iterdir())) == 1
    yesterday = time.time() - 86400
    os.utime(path, (yesterday, yesterday))
    history.record(JOB, "3")
    assert len(list(path.parent.iterdir())) == 2
    assert path.read_text().count("*** ") == 1


def test_per_job_files_are_written_whole_in_human_sort_order(tmp_path: Path) -> None:
    per_job = tmp_path / "per-job"
    per_job.mkdir()
    assert writer(tmp_path, f"STARTD_PER_JOB_HISTORY_DIR = {per_job}\n").record(JOB, "7.0")
    assert [p.name for p in per_job.iterdir()] == ["history.ap#7.0#1"]
    lines = (per_job / "history.ap#7.0#1").read_text().splitlines()
    assert [line.split(" = ")[0] for line in lines] == sorted(
        k for k in JOB if k not in ("ClaimId", "TransferKey"))
    assert not lines[-1].startswith("***")


def test_a_per_job_dir_that_is_no_directory_is_an_error_and_the_file_still_gets_it(
        tmp_path: Path) -> None:  # fmt: skip
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)
    history = writer(tmp_path, f"STARTD_PER_JOB_HISTORY_DIR = {tmp_path}/missing\n")
    assert history.record(JOB, "7.0")
    assert (tmp_path / "log" / "startd_history").read_text().count("*** ") == 1
    events = [json.loads(line) for line in logfile.read_text().splitlines()]
    assert any(e["event"] == "per_job_history_not_written" and "not a directory" in e["why"]
               for e in events), events  # fmt: skip


def test_empty_startd_history_writes_nothing(tmp_path: Path) -> None:
    history = writer(tmp_path, "STARTD_HISTORY =\n")
    assert history.record(JOB, "7.0")
    assert list((tmp_path / "log").iterdir()) == []
    assert history_files(history.settings()) == []


def test_a_file_that_cannot_be_written_is_logged_and_not_raised(tmp_path: Path) -> None:
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)
    history = writer(tmp_path, f"STARTD_HISTORY = {tmp_path}/no/such/dir/history\n")
    assert history.record(JOB, "7.0") is False
    events = [json.loads(line) for line in logfile.read_text().splitlines()]
    failed = [e for e in events if e["event"] == "startd_history_not_written"]
    assert failed and failed[0]["job"] == "7.0" and "No such file" in failed[0]["error"]
    assert "secret" not in logfile.read_text()


def test_a_failed_per_job_file_is_logged_on_its_own_and_the_record_counts_as_written(
        tmp_path: Path) -> None:  # fmt: skip
    """As condor's WritePerJobHistoryFile, apart from the history file: the job's record
    is in STARTD_HISTORY, so it is written (a restart must not write it again)."""
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)
    per_job = tmp_path / "per-job"
    (per_job / "history.ap#7.0#1").mkdir(parents=True)  # the name is taken by a directory
    (per_job / "history.ap#7.0#1" / "x").write_text("")
    history = writer(tmp_path, f"STARTD_PER_JOB_HISTORY_DIR = {per_job}\n")
    assert history.record(JOB, "7.0") is True
    assert (tmp_path / "log" / "startd_history").read_text().count("*** ") == 1
    seen = events(logfile)
    assert not [e for e in seen if e["event"] == "startd_history_not_written"], seen
    (failed,) = [e for e in seen if e["event"] == "per_job_history_not_written"]
    assert failed["job"] == "7.0" and failed["directory"] == str(per_job) and failed["error"]
    assert sorted(p.name for p in per_job.iterdir()) == ["history.ap#7.0#1"]  # no temp left


def test_a_global_job_id_that_is_no_file_name_gets_no_per_job_file(tmp_path: Path) -> None:
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)
    per_job = tmp_path / "per-job"
    per_job.mkdir()
    history = writer(tmp_path, f"STARTD_PER_JOB_HISTORY_DIR = {per_job}\n")
    assert history.record({**JOB, "GlobalJobId": '"../../escape"'}, "7.0")
    assert list(per_job.iterdir()) == [] and not (tmp_path / "escape").exists()
    assert any(e["event"] == "per_job_history_not_written" and "no file name" in e["why"]
               for e in events(logfile))  # fmt: skip
    assert history.record(JOB, "7.1")  # a fine one: written, readable by all (0644)
    assert [p.name for p in per_job.iterdir()] == ["history.ap#7.0#1"]
    assert (per_job / "history.ap#7.0#1").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "log" / "startd_history").stat().st_mode & 0o777 == 0o644


def test_a_rotation_that_fails_is_logged_and_the_record_still_appended(
        tmp_path: Path) -> None:  # fmt: skip
    """condor's "Failed to rotate ... may get very large": the file grows on."""
    logfile = tmp_path / "execd.log"
    log.configure(level="info", fmt="json", path=logfile)
    history = writer(tmp_path, "MAX_HISTORY_LOG = 10\nMAX_HISTORY_ROTATIONS = 1\n")
    path = tmp_path / "log" / "startd_history"
    stuck = path.with_name("startd_history.20200101T000000")  # a backup that cannot go
    stuck.mkdir()
    (stuck / "x").write_text("")
    assert history.record(JOB, "1") and history.record(JOB, "2")
    assert path.read_text().count("*** ") == 2
    failed = [e for e in events(logfile) if e["event"] == "startd_history_not_rotated"]
    assert failed and failed[0]["file"] == str(path) and "directory" in failed[0]["error"]


def test_line_breaks_in_values_and_odd_names_cannot_forge_or_break_a_record(
        tmp_path: Path) -> None:  # fmt: skip
    """A local submitter's ad may hold anything; what execd writes stays one attribute a
    line (newlines escaped as the new ClassAd unparser writes them), one banner a record."""
    forged = '"x\n*** Offset = 0 ClusterId = 666 ProcId = 0\nOwner = \\"mallory\\"\r"'
    ad = {**JOB, "Cmd": forged, "Bad\n*** Offset = 0": "1", "Also Bad": "2",
          "Trailing\n": "3", "Owner": '"alice\n*** Offset = 0"'}  # fmt: skip
    assert writer(tmp_path).record(ad, "7.0")
    lines = (tmp_path / "log" / "startd_history").read_text().splitlines()
    assert [line for line in lines if line.startswith("***")] == lines[-1:]
    assert 'Owner = "alice\\n*** Offset = 0" CompletionDate' in lines[-1]
    assert all(" = " in line and line.split(" = ")[0].isidentifier() for line in lines[:-1])
    assert 'Cmd = "x\\n*** Offset = 0 ClusterId = 666 ProcId = 0\\nOwner' in "\n".join(lines)
    assert len(lines) == len(JOB) - 2 + 1  # the job's public attributes, then its banner


SHORT_WRITE = """
import resource, signal, sys
from pathlib import Path
from execd.config.loader import load_config
from execd.config.settings import Settings
from execd.daemon.startd_history import StartdHistory
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
settings = Settings(load_config(Path(sys.argv[1]), env={}))
resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.RLIM_INFINITY))
ad = {"Cmd": '"' + "x" * 400 + '"', "ClusterId": "1", "ProcId": "0"}
print(StartdHistory(lambda: settings).record(ad, "1.0"))
"""


def test_a_short_write_is_no_record_written(tmp_path: Path) -> None:
    """A file that may not grow past 100 bytes (RLIMIT_FSIZE, as a full disk): the write
    of a longer record comes up short, then fails: not written."""
    settings(tmp_path, "STARTD_HISTORY = $(LOCAL_DIR)/log/startd_history\n")
    done = subprocess.run([sys.executable, "-c", SHORT_WRITE, str(tmp_path / "execd_config")],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "False", done.stdout + done.stderr
    assert "startd_history_not_written" in done.stdout + done.stderr
    assert (tmp_path / "log" / "startd_history").stat().st_size == 100
