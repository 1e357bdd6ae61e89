"""`condor_tail` of a running job (STARTER_PEEK), on `execd run` and on the pool's own
condor_startd (condor_ssh_to_job: test_pool_ssh_to_job.py).

The job writes known lines to its stdout, stderr and a file it names in
transfer_output_files, says so by creating a marker, and waits for a release file
(both in /tmp, which the chroot shares with the host): the tools run while it waits,
so nothing is timed. Each tool's stdout, stderr and exit code must be the same on both
execute points.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = """#!/bin/sh
ready="$1"; release="$2"
echo "out line 1"
echo "out line 2"
echo "err line 1" >&2
i=0
while [ $i -lt 100 ]; do echo "filler line $i"; i=$((i + 1)); done
echo "out last line"
printf 'named %s\\n' 1 2 3 > progress.txt
ln -s /etc/passwd escape.txt
mkdir outdir
touch "$ready"
while [ ! -e "$release" ]; do sleep 0.2; done
rm -f escape.txt
echo "released" | tee escape.txt
"""
TRANSFER = "transfer_output_files = progress.txt, escape.txt, outdir"
# What condor_tail is asked, by name: the tool's own argument lists.
TAILS = {
    "stdout": [],
    "stderr": ["-no-stdout", "-stderr"],
    "both": ["-stderr"],
    "maxbytes": ["-maxbytes", "25"],
    "named": ["-no-stdout", "{job}", "progress.txt"],
    "not-listed": ["-no-stdout", "{job}", "../../../etc/passwd"],
    "symlink-out": ["-no-stdout", "{job}", "escape.txt"],
    "directory": ["-no-stdout", "{job}", "outdir"],  # put_file sends it empty, counted
}
PEEK_OFF = "ENABLE_PEEK_JOB = TARGET.User =!= \"nobody@nowhere\" && MY.Cpus < 0\n"
PEEK_OFF_FILE = "/etc/condor/config.d/95-execd-peek-off.conf"


def tail(pool: harness.Pool, job: str, args: list[str]) -> tuple[int, str, str]:
    """condor_tail's exit code, stdout and stderr (the sandbox's path, which differs
    between the two execute points, as <sandbox>)."""
    argv = [a.format(job=job) for a in args]
    if "{job}" not in args:
        argv.append(job)
    done = pool.tool("condor_tail", *argv, user=harness.SUBMITTER, timeout_s=WAIT_S)
    return done.returncode, done.stdout, re.sub(r"sandbox \(/[^)]*\)", "sandbox (<sandbox>)",
                                                done.stderr)  # fmt: skip


@contextlib.contextmanager
def waiting_job(pool: harness.Pool,
                extra: str = TRANSFER) -> Iterator[tuple[harness.SubmittedJob, Path]]:  # fmt: skip
    """SCRIPT's job, once it has written its output and waits: (the job, the file that
    releases it). Its marker files are removed after."""
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    ready, release = Path(f"/tmp/execd-tail-ready-{stamp}"), Path(f"/tmp/execd-tail-go-{stamp}")
    job = submit_files(pool, PLAIN_SUBMIT.format(args=f"{ready} {release}", extra=extra),
                       {"job.sh": SCRIPT})  # fmt: skip
    try:
        harness.wait_for(f"the job's {ready}", ready.exists, WAIT_S)
        yield job, release
    finally:
        for path in (ready, release):
            path.unlink(missing_ok=True)


def tails_of_a_running_job(pool: harness.Pool) -> dict[str, Any]:
    """Every TAILS case against one job while it waits; then the job's end."""
    with waiting_job(pool) as (job, release):
        job_id = f"{job.cluster}.0"
        seen: dict[str, Any] = {name: tail(pool, job_id, args) for name, args in TAILS.items()}
        release.touch()
        log = job.wait_for_event("005", WAIT_S)
        seen["ended"] = next(line.strip() for line in log.splitlines() if "termination" in line)
        seen["out"] = job.output("out.txt")
        return seen


def test_condor_tail_prints_the_same_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, tails_of_a_running_job)
    for name in TAILS:
        assert ours[name] == theirs[name], name
    assert ours["stdout"][0] == 0
    assert ours["stdout"][1].endswith("filler line 99\nout last line\n")
    assert len(ours["stdout"][1]) == 1024  # condor_tail's default -maxbytes
    assert ours["stderr"] == (0, "err line 1\n", "")
    assert ours["maxbytes"][1] == "filler line 99\nout last line\n"[-25:]
    assert ours["named"] == (0, "named 1\nnamed 2\nnamed 3\n", "")
    assert ours["not-listed"][0] == 1
    assert "requested but not authorized to be sent" in ours["not-listed"][2]
    assert ours["symlink-out"][0] == 1
    assert ours["symlink-out"][2] == ("Failed to peek at file from starter: Invalid symlink or "
                                      "filename (/etc/passwd) outside sandbox (<sandbox>)\n")
    assert ours["directory"][0] == 0 and "Received" not in ours["directory"][2]
    # the job ran on after every request, to its normal end
    assert ours["ended"] == theirs["ended"] == "(1) Normal termination (return value 0)"
    assert ours["out"] == theirs["out"]


@contextlib.contextmanager
def starters_reading(pool: harness.Pool, text: str) -> Iterator[None]:
    """condor_starters started meanwhile read `text` (each starter reads the config)."""
    path = pool.host_path(PEEK_OFF_FILE)
    path.write_text(text)
    try:
        yield
    finally:
        path.unlink()


def tail_of_a_job_not_to_be_peeked(pool: harness.Pool) -> tuple[int, str, str]:
    with waiting_job(pool) as (job, release):
        seen = tail(pool, f"{job.cluster}.0", [])
        release.touch()
        job.wait_for_event("005", WAIT_S)
        return seen


def test_enable_peek_job_false_refuses_condor_tail_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """ENABLE_PEEK_JOB, an expression over the slot (MY) and the job (TARGET), false
    for this job: the same refusal from both starters."""
    ours, theirs = on_both(running_pool, tail_of_a_job_not_to_be_peeked, PEEK_OFF,
                           lambda pool: starters_reading(pool, PEEK_OFF))  # fmt: skip
    assert ours == theirs
    assert ours == (1, "", "Failed to peek at file from starter: Rejecting request, "
                           "because ENABLE_PEEK_JOB=false\n")


def tails_of_a_job_with_one_file_for_both(pool: harness.Pool) -> dict[str, Any]:
    """`error` names `output`'s file: both streams go to one file, which condor_tail
    shows for stdout and for stderr alike."""
    with waiting_job(pool, "error = out.txt") as (job, release):
        job_id = f"{job.cluster}.0"
        seen: dict[str, Any] = {name: tail(pool, job_id, TAILS[name])
                                for name in ("stdout", "stderr", "both")}  # fmt: skip
        release.touch()
        job.wait_for_event("005", WAIT_S)
        seen["out"] = job.output("out.txt")
        return seen


def test_condor_tail_of_a_job_whose_output_and_error_share_a_file(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, tails_of_a_job_with_one_file_for_both)
    assert ours == theirs
    assert ours["stderr"][0] == 0
    # -stderr reads the shared file, stdout's lines included
    assert ours["stderr"][1] == ours["stdout"][1]
    assert ours["stderr"][1].endswith("filler line 99\nout last line\n")
    assert "err line 1\n" in ours["out"]
