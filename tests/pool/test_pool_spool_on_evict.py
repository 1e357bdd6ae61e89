"""`when_to_transfer_output = ON_EXIT_OR_EVICT`: a job vacated gracefully has its sandbox
sent back to the access point (the schedd's spool) before it is requeued, and its next
run starts from it; a fast vacate sends nothing — on `execd run` as on the pool's own
condor_startd.
"""

from __future__ import annotations

import os
from pathlib import Path

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S, administrators
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files, timeless

# The first run leaves its progress in its sandbox and waits to be vacated; the run
# after it says what progress it found.
SPOOL_SCRIPT = """#!/bin/sh
mark=/tmp/execd-spool-$1
if [ -e "$mark" ]; then
  echo second run
  cat progress.txt 2>/dev/null || echo no progress
  rm -f "$mark"
  exit 0
fi
echo first run
echo step one > progress.txt
touch "$mark"
exec sleep 300
"""


def vacate(pool: harness.Pool, job: harness.SubmittedJob, fast: bool) -> None:
    """condor_vacate_job (graceful), or an administrator's condor_vacate -fast."""
    if fast:
        pool.tool("condor_vacate", "-fast", "-all").check()
    else:
        pool.tool("condor_vacate_job", str(job.cluster), user=harness.SUBMITTER).check()


def submit_marked(pool: harness.Pool, script: str, mark: str,
                  ) -> tuple[harness.SubmittedJob, Path]:  # fmt: skip
    """An ON_EXIT_OR_EVICT job of `script`, whose argument is a token of this pool's
    submission, and the host path `mark` names with it (`{token}`), in /tmp (the
    chroot's too): the job touches it to say where it is."""
    token = f"{os.getpid()}-{pool._jobs}"
    job = submit_files(pool, PLAIN_SUBMIT.format(args=token, extra="").replace(
        "ON_EXIT", "ON_EXIT_OR_EVICT"), {"job.sh": script})  # fmt: skip
    return job, Path(mark.format(token=token))


def vacated_with_spool(pool: harness.Pool, fast: bool) -> tuple[list[str], str, str]:
    """A running ON_EXIT_OR_EVICT job vacated: its user-log events, its stdout and the
    progress file after the run that finished it."""
    job, mark = submit_marked(pool, SPOOL_SCRIPT, "/tmp/execd-spool-{token}")
    try:
        job.wait_for_event("001", WAIT_S)
        harness.wait_for("the first run's mark", mark.exists, WAIT_S, 0.1)
        vacate(pool, job, fast)
        job.wait_for_event("004", WAIT_S)
        job.wait_for_event("005", 2 * WAIT_S)
    finally:
        mark.unlink(missing_ok=True)
    progress = job.output("progress.txt") if (job.host_dir / "progress.txt").exists() else ""
    return timeless(job.events()), job.output("out.txt"), progress


@pytest.mark.parametrize("fast", [False, True], ids=["graceful", "fast"])
def test_a_vacated_on_exit_or_evict_job_resumes_from_its_spooled_sandbox(
        running_pool: harness.RunningPool, fast: bool) -> None:  # fmt: skip
    admins = administrators(running_pool.get(with_startd=False))
    ours, theirs = on_both(running_pool, lambda pool: vacated_with_spool(pool, fast), admins)
    assert ours == theirs
    # graceful: the sandbox was spooled (040s before 004) and the next run found it
    assert ours[1] == ("second run\nno progress\n" if fast else "second run\nstep one\n")
