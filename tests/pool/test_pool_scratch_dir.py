"""`$$(CondorScratchDir)` in a job's environment: the slot ad offers the placeholder
condor_startd offers, the schedd writes it into the job, and the starter replaces it
with the job's scratch directory before the job starts — on `execd run` as on the
pool's own condor_startd.
"""

from __future__ import annotations

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, submit_files

SCRIPT = """#!/bin/sh
[ "$SCRATCH" = "$(pwd)" ] && echo "SCRATCH is the job's directory"
[ "$SCRATCH" = "$_CONDOR_SCRATCH_DIR" ] && echo "SCRATCH is _CONDOR_SCRATCH_DIR"
echo "$WORK" | sed "s|^$SCRATCH/|<scratch>/|"
"""
ENVIRONMENT = "environment = \"SCRATCH=$$(CondorScratchDir) WORK=$$(CondorScratchDir)/work\""


def scratch_seen(pool: harness.Pool) -> tuple[str, str]:
    """The job's view of its expanded environment, and how it ended."""
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=ENVIRONMENT),
                       {"job.sh": SCRIPT})  # fmt: skip
    log = job.wait_for_event("005", WAIT_S)
    ended = next(line.strip() for line in log.splitlines() if "termination" in line)
    return job.output("out.txt"), ended


def test_condor_scratch_dir_expands_to_the_jobs_directory_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, scratch_seen)
    assert ours == theirs
    assert ours == ("SCRATCH is the job's directory\nSCRATCH is _CONDOR_SCRATCH_DIR\n"
                    "<scratch>/work\n", "(1) Normal termination (return value 0)")
