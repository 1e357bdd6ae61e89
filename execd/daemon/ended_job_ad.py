"""The ad of a job that ended here, as condor_startd holds it when its starter exits
(Starter::exited), for the STARTD_HISTORY record (execd.daemon.startd_history).

condor_startd's copy of a job's ad is the claim's: the ACTIVATE_CLAIM job ad, with each
update its starter sent merged in (Claim::receiveJobClassAdUpdate: the periodic usage,
the resources provisioned, the exit with `JobState = "Exited"`, ExitCode or ExitSignal,
JobDuration, and in the final update the bytes its transfers moved, BytesRecvd and
BytesSent). When the starter exits the startd adds:

- `CompletionDate`: now; `RemoteWallClockTime`: whole seconds since the starter started
  (here: since the job was activated, when execd's starter side starts);
- `StarterExitStatus`: the starter's wait status (0: execd's starter reported; 9, its
  SIGKILL, where it left no report) and `JobStatus`: 4 (completed), or 3 (removed) where
  the starter died by a signal — whatever became of the job itself;
- `BadputCausedByDraining` / `BadputCausedByPreemption`: the startd evicted the job
  while draining; the claim's flag that condor_startd's policy sets (ResState's
  change_to_suggested_state) and the policy engine keeps as Slot.preemption_badput:
  PREEMPT, KILL, or a retirement's end while not draining (a graceful condor_vacate, a
  preempting claim, a graceful shutdown). A command's kill_claim sets none (condor_vacate
  -fast, the schedd's RELEASE_CLAIM, a fast shutdown, a p-slot taking d-slots back), nor
  a condor_rm or a DEACTIVATE_CLAIM.

A job run on execd alone (`execd job submit`) has the ad it was submitted with, the
starter's last measurements and its exit; its `GlobalJobId` is execd's job id unless
the ad names one, and ClusterId, ProcId and Owner are there only if the submitter set
them (the record's banner then says -1, -1 and "?", as HTCondor writes for such an ad).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from execd.daemon.job import preemption_badput
from execd.daemon.pool_job import wait_status
from execd.daemon.pool_job_attrs import read_status, starter_update
from execd.wire.classad_codec import from_values
from execd.wire.job_runner import JobExit

if TYPE_CHECKING:
    from execd.daemon.job import Job
    from execd.daemon.jobs import JobManager

COMPLETED, REMOVED = 4, 3  # JobStatus
STARTER_KILLED = 9  # the wait status of a starter that died by SIGKILL
# A starter that never ran its job (its input transfer failed, it was evicted first, the
# job could not be exec'd) sends no exit: the record has none.
NEVER_RAN = ("not_started", "evicted_before_start", "spawn_failed")
def exit_update(job: Job) -> dict[str, str]:
    """The starter's exit update of `job` (what the shadow's conversation sends)."""
    report = job.report or {}
    duration = float(report.get("RemoteWallClockTime") or time.time() - job.started)
    return JobExit(wait_status(report), duration, vacate=job.vacate_reason).exit_ad()


def ended_job_ad(jobs: JobManager, job: Job, now: float) -> dict[str, str]:
    """`job`'s ad as condor_startd appends it to its history, as old-syntax text."""
    if job.claim_ad is not None:  # a pool job: the activation ad and its updates
        # where job_exit says it ran (execd is its starter), as condor_starter's address
        ad = {**job.claim_ad, "StarterIpAddr": from_values({"X": job.claim.session_id.split(
            "#", 1)[0]})["X"]}  # fmt: skip
    else:
        ad = from_values({k: v for k, v in job.ad.items() if v is not None})
        # a job that never ran has no measurements (a status would be made up)
        ran = (job.report or {}).get("ExitReason") not in NEVER_RAN
        status = read_status(jobs, job) if ran else {}
        if status:
            ad |= from_values(starter_update(status, int(job.started), False, None, ("", "")))
        ad.setdefault("GlobalJobId", from_values({"X": job.job_id})["X"])
    ad |= job.updates
    report = job.report or {}
    ran = report.get("ExitReason") not in NEVER_RAN
    if ran and "ExitBySignal" not in job.updates:  # no exit update went out: the report's
        ad |= exit_update(job)
    ad.setdefault("_condor_JOBINFO_MAXINTERVAL", "-1")  # the last update's (final) mark
    if job.transferred is not None:
        received, sent = job.transferred
        ad |= {"BytesRecvd": str(received), "BytesSent": str(sent)}
    starter_status = STARTER_KILLED if report.get("ExitReason") == "no_report" else 0
    draining = job.evicted and jobs.drain_recorded
    ad |= from_values({
        "CompletionDate": int(now),
        "RemoteWallClockTime": int(now) - int(job.started),
        "StarterExitStatus": starter_status,
        "JobStatus": REMOVED if starter_status else COMPLETED,
        "BadputCausedByDraining": draining,
        "BadputCausedByPreemption": preemption_badput(job, jobs.daemon.engine.slots.get(job.slot)),
    })  # fmt: skip
    return ad
