"""What the shadow is told about a pool job, from the starter's durable report, and how
the conversation reads the job ad's file transfer settings."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from execd.daemon.pool_job import hold_from_report, wait_status
from execd.wire.job_runner import JobExit, JobLaunch, exec_failure
from execd.wire.shadow_job import shared_fs_launch, wants_transfer


@pytest.mark.parametrize(("report", "code", "by_signal"), [
    ({"ExitBySignal": False, "ExitCode": 3}, 3, False),
    ({"ExitBySignal": True, "ExitSignal": 15}, 15, True),
    ({"ExitReason": "evicted_before_start"}, signal.SIGKILL, True),  # never ran
])  # fmt: skip
def test_the_reports_exit_becomes_the_wait_status(report: dict[str, object], code: int,
                                                  by_signal: bool) -> None:  # fmt: skip
    done = JobExit(wait_status(report), 1.0)
    assert (done.code, done.by_signal) == (code, by_signal)
    assert done.exit_ad()["ExitBySignal"] == ("true" if by_signal else "false")


@pytest.mark.parametrize(("how", "domain", "expected"), [
    ("YES", "a", True), ("NO", "a", False), (None, "a", True),
    ("IF_NEEDED", "a", False), ("IF_NEEDED", "b", True),
])  # fmt: skip
def test_should_transfer_files_as_the_starter_reads_it(how: str | None, domain: str,
                                                       expected: bool) -> None:  # fmt: skip
    job: dict[str, object] = {"FileSystemDomain": "a"}
    if how is not None:
        job["ShouldTransferFiles"] = how
    assert wants_transfer(job, domain) is expected


def test_a_job_without_transfer_runs_in_its_iwd_with_its_own_stdio() -> None:
    job: dict[str, object] = {"Iwd": "/shared/job", "In": "/dev/null", "Out": "out.txt",
                              "Err": "/shared/err.txt"}  # fmt: skip
    launch = shared_fs_launch(JobLaunch(job, ["/bin/true"], Path("/x/dir_1"), {}, (1, 1), None))
    assert launch.workdir == Path("/shared/job")
    assert launch.stdin_name is None
    assert launch.path(launch.stdout_name) == Path("/shared/job/out.txt")
    assert launch.path(launch.stderr_name) == Path("/shared/err.txt")


def test_exec_failure_names_a_missing_interpreter(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/nonexistent/sh\necho hi\n")
    text = exec_failure([str(script), "a"], 2)
    assert text == (f"Failed to execute '{script}' with arguments a: invalid interpreter "
                    "(/nonexistent/sh) specified on first line of script "
                    f"(errno=2: '{os.strerror(2)}')")  # fmt: skip


def test_a_report_that_holds_says_why_with_htcondors_codes() -> None:
    oom = {"ExitReason": "held", "HoldReasonCode": 34, "HoldReasonSubCode": 102,
           "HoldReason": "Job has gone over cgroup memory limit of 64 megabytes."}
    held = hold_from_report(oom, ["/bin/sh"])
    assert held is not None and (held.code, held.subcode) == (34, 102)
    assert str(held) == oom["HoldReason"]
    spawn = hold_from_report({"ExitReason": "spawn_failed", "HoldReasonCode": 6,
                              "HoldReasonSubCode": 13}, ["/x/job.sh", "a"])  # fmt: skip
    assert spawn is not None and (spawn.code, spawn.subcode) == (6, 13)
    assert str(spawn).startswith("Failed to execute '/x/job.sh' with arguments a: ")
    # an Iwd the job cannot enter: named as HTCondor's daemon_core names it, no errno
    iwd = hold_from_report({"ExitReason": "spawn_failed", "HoldReasonCode": 6,
                            "HoldReasonSubCode": 2, "SpawnError":
                            'Cannot access initial working directory "/home/u/job1"'},
                           ["/bin/sleep", "300"])  # fmt: skip
    assert iwd is not None and (iwd.code, iwd.subcode) == (6, 2)
    assert str(iwd) == ("Failed to execute '/bin/sleep' with arguments 300: Cannot access "
                        'initial working directory "/home/u/job1"')  # fmt: skip
    # any other spawn failure: exec_failure's words, whatever the child said
    other = hold_from_report({"ExitReason": "spawn_failed", "HoldReasonCode": 6,
                              "HoldReasonSubCode": 13, "SpawnError": "Permission denied: /x"},
                             ["/x"])  # fmt: skip
    assert str(other) == f"Failed to execute '/x': {os.strerror(13)} (errno=13: " \
        f"'{os.strerror(13)}')"
    assert hold_from_report({"ExitReason": "exited", "ExitCode": 0}, ["/bin/true"]) is None
    assert hold_from_report({"ExitReason": "soft_killed"}, ["/bin/true"]) is None


def test_a_startd_vacate_reason_reaches_the_shadow_in_the_exit_ad() -> None:
    """condor_starter passes the startd's vacate reason on (VacateReason*), which the
    shadow's 004 event then says; without one the exit ad has none (the shadow says
    "Unspecified job interruption")."""
    killed = signal.SIGKILL.value  # the wait status of a SIGKILLed job
    plain = JobExit(killed, 2.0, requested=True).exit_ad()
    assert not [k for k in plain if k.startswith("Vacate")]
    ad = JobExit(killed, 2.0, requested=True,
                 vacate=('Preempted for a "Priority" user', 1019, 0)).exit_ad()
    assert (ad["VacateReason"], ad["VacateReasonCode"], ad["VacateReasonSubCode"]) \
        == ('"Preempted for a \\"Priority\\" user"', "1019", "0")  # fmt: skip
    assert ad["ExitSignal"] == "9"


def test_a_signal_exit_says_why_and_a_core_only_when_there_is_one() -> None:
    """As condor_starter's UserProc::PublishUpdateAd: ExitReason "died on signal N
    (Name)"; JobCoreDumped only when the job dumped core (OsProc sets no false)."""
    killed = JobExit(signal.SIGKILL.value, 1.0).exit_ad()
    assert killed["ExitReason"] == '"died on signal 9 (Killed)"'
    assert "JobCoreDumped" not in killed
    cored = JobExit(signal.SIGSEGV.value | 0x80, 1.0).exit_ad()
    assert (cored["ExitReason"], cored["JobCoreDumped"]) == \
        ('"died on signal 11 (Segmentation fault)"', "true")  # fmt: skip
    assert "ExitReason" not in JobExit(3 << 8, 1.0).exit_ad()


def test_the_starters_core_flag_reaches_the_shadows_exit() -> None:
    """The starter reports JobCoreDumped (WCOREDUMP of the job's wait status); the
    shadow's exit says so (its JOB_COREDUMPED), and says nothing without it."""
    cored = {"ExitBySignal": True, "ExitSignal": 11, "JobCoreDumped": True}
    assert JobExit(wait_status(cored), 1.0).exit_ad()["JobCoreDumped"] == "true"
    plain = {"ExitBySignal": True, "ExitSignal": 11}
    assert "JobCoreDumped" not in JobExit(wait_status(plain), 1.0).exit_ad()
