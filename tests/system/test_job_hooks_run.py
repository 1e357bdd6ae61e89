"""A real PREPARE_JOB hook runs as the job user with the job ad on stdin."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from execd.hooks.job_hooks import prepare_job_outcome, run_hook

NOBODY = 65534


def test_prepare_hook_runs_as_nobody_and_edits_the_ad() -> None:
    # pytest's tmp_path is inside a root-only directory: nobody could not exec the hook.
    workdir = Path(tempfile.mkdtemp(prefix="execd-test-hook-"))
    workdir.chmod(0o755)
    try:
        check_hook(workdir)
    finally:
        shutil.rmtree(workdir)


def check_hook(workdir: Path) -> None:
    hook = workdir / "prepare"
    hook.write_text('#!/bin/sh\nread first\necho "RanAs = $(id -u)"\necho "Saw = \\"$first\\""\n')
    hook.chmod(0o755)
    result = run_hook(str(hook), [], "JobPrio = 3\n", uid=NOBODY, gid=NOBODY, timeout=20)
    out = prepare_job_outcome(result)
    assert out.action == "run", result
    assert out.edits == {"RanAs": str(NOBODY), "Saw": '"JobPrio = 3"'}
