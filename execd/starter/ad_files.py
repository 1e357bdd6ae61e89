"""The job's own ads in its scratch directory, as condor_starter gives every job them.

condor_starter (starter.cpp WriteAdFiles) writes `.job.ad` (the job's ad) and
`.machine.ad` (the slot's ad its startd handed it) into the job's scratch directory
before the job starts, in the long form (one `Name = value` per line, names in byte
order, private attributes such as ClaimId left out), and points the job at them with
`_CONDOR_JOB_AD` and `_CONDOR_MACHINE_AD`. Pilots and wrappers read them for the job's
id, its requested resources, the slot's memory and GPUs. They, and condor_startd's
`.update.ad`, never go back with the output (jic_shadow.cpp ALWAYS_EXCLUDED_FILES).

Stdlib only: the starter writes them for local jobs (the texts come in its spec), the
daemon's shadow conversation for pool jobs.
"""

from __future__ import annotations

import contextlib
import os

JOB_AD_FILE = ".job.ad"
MACHINE_AD_FILE = ".machine.ad"
# condor_startd's copy of the slot's ad as it publishes it (execd/daemon/update_ad.py) and
# its temporary name: never sent back either.
UPDATE_AD_FILES = (".update.ad", ".update.ad.tmp")
NEVER_SENT_BACK = frozenset({JOB_AD_FILE, MACHINE_AD_FILE, *UPDATE_AD_FILES})
AD_FILE_MODE = 0o644  # as condor_starter's fopen "w" under its umask 022


def ad_file_env(scratch: str) -> dict[str, str]:
    """`_CONDOR_JOB_AD` and `_CONDOR_MACHINE_AD`: the files' paths in the scratch."""
    return {"_CONDOR_JOB_AD": os.path.join(scratch, JOB_AD_FILE),
            "_CONDOR_MACHINE_AD": os.path.join(scratch, MACHINE_AD_FILE)}  # fmt: skip


def write_ad_file(scratch: str, name: str, text: str, uid: int, gid: int) -> None:
    """`scratch/name` holding `text`, the job user's, mode 0644. An entry of that name
    (one the job's input brought) is replaced: unlinked, never followed; a new file is
    made with O_EXCL | O_NOFOLLOW, so a link put there meanwhile fails the write rather
    than redirecting it. OSError where it cannot be written (a directory of that name)."""
    path = os.path.join(scratch, name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, AD_FILE_MODE)
    try:
        os.fchown(fd, uid, gid)
        os.fchmod(fd, AD_FILE_MODE)  # whatever the writer's umask
        data = memoryview(text.encode("utf-8", "surrogateescape"))  # the shadow's bytes
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def write_ad_files(scratch: str, job_ad: str, machine_ad: str, uid: int, gid: int) -> None:
    """Both files, each tried on its own (as condor_starter's WriteAdFiles): one that
    cannot be written does not keep the other from being written. OSError afterwards,
    naming each that failed: the caller logs it and the job runs all the same, as
    condor_starter's does (the variables are set either way)."""
    failed: list[OSError] = []
    for name, text in ((JOB_AD_FILE, job_ad), (MACHINE_AD_FILE, machine_ad)):
        try:
            write_ad_file(scratch, name, text, uid, gid)
        except OSError as exc:
            failed.append(exc)
    if len(failed) == 1:
        raise failed[0]
    if failed:
        raise OSError("; ".join(str(exc) for exc in failed))
