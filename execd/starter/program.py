"""The starter program: read the spec, plan the job, run it to its end (execd.starter.run).

`python -S -m execd.starter SPEC.json` comes here (main), and so does the starter zygote:
it calls prepare before it forks and run in the forked starter, so that what prepare makes
is in pages the starters share.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import NamedTuple

from execd.errors import ExecdError
from execd.starter import report as rpt
from execd.starter.run import CONTROL, Starter, event
from execd.starter.spec import StarterSpec


class BadSpec(NamedTuple):
    """The spec could not be read: no report can be written (no report path)."""

    error: Exception


class FailedSetup(NamedTuple):
    """The spec was read but the starter cannot be set up: a report says why."""

    spec: StarterSpec
    error: Exception


Prepared = Starter | BadSpec | FailedSetup


def prepare(spec_path: str) -> Prepared:
    """Read the spec and plan the job, with no side effect on the job's cgroup or files.

    The starter zygote does this before it forks the starter, so that the objects it
    makes are in pages the starters share (a starter's own memory is what it writes)."""
    try:
        with open(spec_path) as f:
            spec = StarterSpec.from_dict(json.load(f))
    except (OSError, ValueError) as exc:
        return BadSpec(exc)
    try:
        return Starter(spec)
    except (ExecdError, OSError) as exc:
        return FailedSetup(spec, exc)


def _failed(spec: StarterSpec, exc: Exception) -> int:
    event("starter_failed", job=spec.job_id, error=repr(str(exc)))
    rpt.write_durably(
        spec.report_path,
        {"JobId": spec.job_id, "ExitReason": "starter_failed", "StarterError": str(exc)},
    )
    return 1


def run(prepared: Prepared) -> int:
    """Run the prepared job to its end: 0 done, 1 the starter failed (reported), 2 no spec."""
    if isinstance(prepared, BadSpec):
        sys.stderr.write(f"starter_bad_spec error={prepared.error!r}\n")
        return 2
    if isinstance(prepared, FailedSetup):
        return _failed(prepared.spec, prepared.error)
    starter = prepared
    starter.report["StarterPid"] = os.getpid()  # prepared in the zygote, run here
    try:
        starter.start()
        if starter.exit_reason != "spawn_failed":
            starter.watch()
        starter.announce_exit()
        starter.finish()
    except (ExecdError, OSError) as exc:
        return _failed(starter.spec, exc)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -S -m execd.starter SPEC.json\n")
        return 2
    signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the daemon going away is not our end
    return run(prepare(argv[0]))
