"""A job whose output and error name the same file gets both streams in it, interleaved
in the order the job wrote them — on `execd run` as on the pool's own condor_startd
(whose starter points the job's stderr at its stdout file when the names match, and
opens the job's output files for appending).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files

SCRIPT = "#!/bin/sh\necho out 1\necho err 2 >&2\necho out 3\necho err 4 >&2\necho out 5\n"
BOTH = "out 1\nerr 2\nout 3\nerr 4\nout 5\n"


def transferred(pool: harness.Pool, stdio: str = "output = both.txt\nerror = both.txt\n",
                ) -> tuple[str, str, list[str]]:  # fmt: skip
    """With file transfer: the job's files as the shadow delivered them to its Iwd."""
    job = submit_files(pool, (
        f"executable = job.sh\n{stdio}log = job.log\n"
        "should_transfer_files = YES\nwhen_to_transfer_output = ON_EXIT\n"
        "request_memory = 64\nqueue\n"), {"job.sh": SCRIPT})  # fmt: skip
    log = job.wait_for_event("005", WAIT_S)
    ended = next(line.strip() for line in log.splitlines() if "termination" in line)
    both = job.host_dir / "both.txt"
    return (both.read_text() if both.exists() else "", ended,
            sorted(p.name for p in job.host_dir.iterdir()))


def discarded(pool: harness.Pool) -> tuple[str, str, list[str]]:
    """No output or error named: both streams are discarded, nothing comes back."""
    return transferred(pool, "")


def shared(pool: harness.Pool) -> tuple[str, str, list[str]]:
    """should_transfer_files = NO: the job writes into its Iwd on the shared /tmp."""
    with tempfile.TemporaryDirectory(prefix="execd-stdio-", dir="/tmp") as iwd:
        os.chmod(iwd, 0o777)
        script = Path(iwd) / "job.sh"
        script.write_text(SCRIPT)
        script.chmod(0o755)
        job = submit_files(pool, (
            f"executable = {script}\ninitialdir = {iwd}\noutput = both.txt\n"
            "error = both.txt\nlog = job.log\nshould_transfer_files = NO\n"
            "request_memory = 64\nqueue\n"), {})  # fmt: skip
        job.host_dir = Path(iwd)
        log = job.wait_for_event("005", WAIT_S)
        ended = next(line.strip() for line in log.splitlines() if "termination" in line)
        return job.output("both.txt"), ended, sorted(p.name for p in job.host_dir.iterdir())


@pytest.mark.parametrize("how", [transferred, shared], ids=["transferred", "shared_fs"])
def test_output_and_error_in_one_file_as_on_condor_startd(
        running_pool: harness.RunningPool, how: object) -> None:  # fmt: skip
    assert callable(how)
    ours, theirs = on_both(running_pool, how)
    assert ours == theirs
    assert ours[:2] == (BOTH, "(1) Normal termination (return value 0)")


def test_unnamed_output_and_error_are_discarded_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, discarded)
    assert ours == theirs
    assert ours == ("", "(1) Normal termination (return value 0)", ["job.log", "job.sh", "job.sub"])
