"""The job and claim attributes of a claimed slot's ad, as HTCondor 25's startd
publishes them (Claim::publish, Resource::publish_dynamic and the starter's job
updates), so that condor_status -run, condor_who, monitoring and the negotiator read
the same on execd as on condor_startd.

Where each comes from, and for how long it is there:

- the claim (REQUEST_CLAIM), for as long as it lasts: `RemoteScheddName` (the request
  ad's `ScheddName`), `ClientMachine` (the claiming peer's host name, by HTCondor's
  get_full_hostname: reverse then forward lookup, a name with a dot, else
  `DEFAULT_DOMAIN_NAME` appended, else the address), `RemoteGroup`,
  `RemoteNegotiatingGroup` and `RemoteAutoregroup` (the negotiator's match, which the
  schedd writes into the request ad), `NumPids` (the last starter update's count; 0
  on every unclaimed slot too, as condor_startd's claim object publishes it there);
  `PublicClaimId` (the claim id without its secret) and `ClaimEndTime` (0: only a
  claimed p-slot has an end) while the slot is Claimed;
- the *claim's job ad*, while the slot is Claimed or Preempting: the request ad until
  the first activation, then the activation's job ad with each starter update merged
  in, gone once that job's starter has exited (condor_startd deletes it then). Copied
  from it are SYSTEM_STARTD_JOB_ATTRS (below) and the attributes STARTD_JOB_ATTRS
  names; `JobPid` once an update has named it;
- the activation, from the job's start until its starter exits: `JobId`
  (`<cluster>.<proc>`), `GlobalJobId`, `StarterPid`, and, from the startd's own
  measurements of the job (here the starter's status file, read as the ad is made),
  `ImageSize` (KiB) and `CPUsUsage` (cores busy between its last two measurements; 0
  until the first two).

The starter's update (register_job_info to the shadow; condor_starter sends the same
ad to its startd) carries the usage, and, for a job with file transfer, the sandbox's
`DiskUsage` (KiB of its files), `ScratchDirFileCount` (its files and directories, as
condor_starter counts them) and the mtimes of the job's stdout and stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import classads
from execd.machine.hostname import client_machine
from execd.starter.report import BLOCK_IO_ATTRS, whole_seconds
from execd.starter.sandbox import walk_tree

if TYPE_CHECKING:
    from execd.claims.ids import ClaimId
    from execd.daemon.job import Job
    from execd.daemon.jobs import JobManager
    from execd.policy.slot import Slot

# condor_startd's SYSTEM_STARTD_JOB_ATTRS (param_info.in), in its spelling: the names
# condor_status prints are those the startd first inserted (CPUsUsage, not CpusUsage).
SYSTEM_STARTD_JOB_ATTRS = (
    "ImageSize", "ExecutableSize", "JobUniverse", "NiceUser", "CPUsUsage",
    "ResidentSetSize", "ProportionalSetSizeKb", "MemoryUsage", "DiskUsage", "StdoutMtime",
    "StderrMtime", "ScratchDirFileCount",
)  # fmt: skip
# MEMORY_USAGE_METRIC's default: what condor_starter puts in its updates as MemoryUsage.
MEMORY_USAGE = "((ResidentSetSize + 1023) / 1024)"


def read_status(jobs: JobManager, job: Job) -> dict[str, Any]:
    """The starter's latest measurements of `job` (its status file), or {}."""
    try:
        status = json.loads((jobs.workdir(job.job_id) / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) else {}


def public_claim_id(claim: ClaimId) -> str:
    """The claim id as HTCondor shows it in public: its secret replaced by `...`."""
    return f"{claim.session_id}#..."


def sandbox_usage(sandbox: Path) -> tuple[int, int]:
    """(bytes of its files, entries) of a sandbox, as condor_starter's GetDiskUsage
    (Directory::GetDirectorySize) counts them: every file, directory and symlink is an
    entry; the sizes of files only. An entry whose lstat fails is no entry. Symlinks are
    never followed, not even stat'd: this runs as root in one of the daemon's few worker
    threads (PoolJob.usage), which a link to a hung mount would hold, and a link to a
    root-only path would let the job probe it (condor_starter stats link targets as the
    job's user; docs/pool.md)."""
    size = entries = 0
    for _, info in walk_tree(str(sandbox)):  # skips an entry whose lstat fails
        if not stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode):
            size += info.st_size
        entries += 1
    return size, entries


def starter_update(status: dict[str, Any], started: int, suspended: bool,
                   sandbox: Path | None, stdio: tuple[str, str]) -> dict[str, Any]:  # fmt: skip
    """The values of one job update, as condor_starter sends it to its shadow and its
    startd: the starter's latest measurements (block I/O only where measured), and with
    file transfer (`sandbox`) the sandbox's size, entries and the stdout/stderr mtimes."""
    update: dict[str, Any] = {
        "JobPid": int(status.get("JobPid", 0)),
        "NumPids": int(status.get("NumProcesses", 0)),
        "JobState": "Suspended" if suspended else "Running",
        "JobStartDate": started,
        "ImageSize": int(status.get("ImageSize", 0)),
        "ResidentSetSize": int(status.get("ResidentSetSize", 0)),
        "MemoryUsage": classads.parse_expr(MEMORY_USAGE),
        "RemoteUserCpu": whole_seconds(status.get("RemoteUserCpu", 0.0)),
        "RemoteSysCpu": whole_seconds(status.get("RemoteSysCpu", 0.0)),
        "ExecuteDirWasEncrypted": False,  # execd never encrypts a sandbox
    }
    # Block I/O as the starter measured it from the job cgroup's io.stat, where the
    # cgroup has the io controller; unmeasured, left out
    update |= {k: int(status[k]) for k in BLOCK_IO_ATTRS if isinstance(status.get(k), int)}
    if sandbox is not None:
        size, entries = sandbox_usage(sandbox)
        update["DiskUsage"] = (size + 1023) // 1024
        update["ScratchDirFileCount"] = entries
        for attr, name in zip(("StdoutMtime", "StderrMtime"), stdio, strict=True):
            if name == os.devnull:
                continue  # a discarded stream (Out/Err unset): none, as condor_starter's
            # Not followed: a job's symlink must not have root stat a path it cannot
            # (a root-only file's mtime, a hung mount); condor_starter's stat follows it,
            # execd leaves the attribute out for anything but a regular file
            try:
                info = os.stat(sandbox / name, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                update[attr] = int(info.st_mtime)
    return update


@dataclass
class ClaimFacts:
    """What execd keeps of one claim for its slot's ad."""

    client_machine: str
    num_pids: int = 0
    job_id: str | None = None  # the job the update below is of
    update: dict[str, Any] = field(default_factory=dict)


@dataclass
class _CpuSample:
    wall: float  # the job's run time at the measurement
    cpu: float  # its user + system CPU seconds then
    usage: float = 0.0  # cores busy between the two last measurements


class JobAttributes:
    """The job and claim attributes of every pool-claimed slot."""

    def __init__(self, jobs: JobManager, settings: Callable[[], Any]) -> None:
        self.jobs = jobs
        self._settings = settings  # the daemon's current ones (a reload replaces them)
        self._read: Any = None  # the settings the knobs below were read from
        self.copied: tuple[str, ...] = SYSTEM_STARTD_JOB_ATTRS
        self.no_dns, self.default_domain = False, ""  # NO_DNS, DEFAULT_DOMAIN_NAME
        self.claims: dict[str, ClaimFacts] = {}  # full claim id -> facts
        self._cpu: dict[str, _CpuSample] = {}  # job id -> its last measurement

    def _configure(self) -> None:
        """STARTD_JOB_ATTRS, NO_DNS and DEFAULT_DOMAIN_NAME, read again after a reload."""
        settings = self._settings()
        if settings is self._read:
            return
        names = [*SYSTEM_STARTD_JOB_ATTRS, *settings.get_list("STARTD_JOB_ATTRS")]
        self.copied = tuple(dict.fromkeys(names))  # in order, each once
        self.no_dns = settings.get_bool("NO_DNS")
        self.default_domain = settings.get_str("DEFAULT_DOMAIN_NAME") or ""
        self._read = settings

    def claimed(self, claim: ClaimId, client: str) -> None:
        """`claim` was made by (or, after a restart, is held by) host `client`."""
        facts = self.claims.setdefault(claim.full(), ClaimFacts(client))
        facts.client_machine = client

    async def note_client(self, claim: ClaimId, peer: str) -> None:
        """claimed() with the host name of `peer` (`ip:port`), looked up off the loop."""
        self._configure()
        name = await asyncio.to_thread(client_machine, peer, no_dns=self.no_dns,
                                       default_domain=self.default_domain)  # fmt: skip
        self.claimed(claim, name)

    def updated(self, claim_id: str, job_id: str, update: dict[str, Any]) -> None:
        """A starter update of `job_id` on claim `claim_id` (what the shadow was sent)."""
        facts = self.claims.get(claim_id)
        if facts is None:  # a claim a restarted execd adopted: its peer is not known
            facts = self.claims[claim_id] = ClaimFacts("")
        facts.num_pids = int(update.get("NumPids", 0))
        facts.job_id, facts.update = job_id, update

    def forget(self, claim_id: str) -> None:
        self.claims.pop(claim_id, None)

    def attributes(self, slot: Slot) -> dict[str, Any]:
        self._configure()
        claim = slot.claim
        if claim is None:
            return {"NumPids": 0}
        facts = self.claims.get(claim.id.full())
        out: dict[str, Any] = {"NumPids": facts.num_pids if facts else 0}
        request = claim.request_ad
        if request is not None and isinstance(request.get("ScheddName"), str):
            out["RemoteScheddName"] = request["ScheddName"]
        if facts is not None and facts.client_machine:
            out["ClientMachine"] = facts.client_machine
        if request is not None:
            if isinstance(group := request.get("RemoteGroup"), str) and group:
                out["RemoteGroup"] = group
            if isinstance(group := request.get("RemoteNegotiatingGroup"), str) and group:
                out["RemoteNegotiatingGroup"] = group
                out["RemoteAutoregroup"] = request.get("RemoteAutoregroup") is True
        state = slot.state.value
        if state not in ("Claimed", "Preempting"):
            return out
        job = self.jobs.running.get(slot.name)
        if job is not None and job.claim.full() != claim.id.full():
            job = None
        out |= self._job_ad_attributes(claim.request_ad, job, facts, claim.jobs_run)
        if job is not None:
            out |= self._activation(job)
        if state == "Claimed":
            out["PublicClaimId"] = public_claim_id(claim.id)
            out["ClaimEndTime"] = 0
        return out

    def _job_ad_attributes(self, request: Any, job: Job | None, facts: ClaimFacts | None,
                           jobs_run: int) -> dict[str, Any]:  # fmt: skip
        """SYSTEM_STARTD_JOB_ATTRS + STARTD_JOB_ATTRS from the claim's job ad, and JobPid."""
        if job is not None:
            ad: dict[str, Any] = dict(job.ad)
            if facts is not None and facts.job_id == job.job_id:
                ad |= facts.update
        elif jobs_run == 0 and request is not None:
            ad = {k: request[k] for k in self.copied if k in request}
        else:
            return {}  # its job's starter has exited: condor_startd dropped the job ad
        out = {k: ad[k] for k in self.copied if k in ad}
        if job is not None and isinstance(pid := ad.get("JobPid"), int) and pid:
            out["JobPid"] = pid
        return out

    def _activation(self, job: Job) -> dict[str, Any]:
        out: dict[str, Any] = {}
        cluster, proc = job.ad.get("ClusterId"), job.ad.get("ProcId")
        if isinstance(cluster, int) and cluster > 0:
            out["JobId"] = f"{cluster}.{proc if isinstance(proc, int) and proc >= 0 else 0}"
        if isinstance(gjid := job.ad.get("GlobalJobId"), str):
            out["GlobalJobId"] = gjid
        if job.handle is not None and job.handle.pid:
            out["StarterPid"] = job.handle.pid
        status = read_status(self.jobs, job)
        # condor_startd's active claim publishes its CPUsUsage from the activation on, 0
        # until measured (and .update.ad, the job updates' CpusUsage, carries it)
        out["CPUsUsage"] = 0.0
        if status:
            out["ImageSize"] = int(status.get("ImageSize", 0))
            out["CPUsUsage"] = self.cpus_usage(job.job_id, status)
        return out

    def cpus_usage(self, job_id: str, status: dict[str, Any]) -> float:
        """Cores the job kept busy between the starter's last two measurements (the
        slot ad's CPUsUsage; the job updates' CpusUsage)."""
        wall = float(status.get("RemoteWallClockTime", 0.0))
        cpu = float(status.get("RemoteUserCpu", 0.0)) + float(status.get("RemoteSysCpu", 0.0))
        last = self._cpu.get(job_id)
        if last is None:
            self._cpu = {j: s for j, s in self._cpu.items() if j in self._live_jobs()}
            self._cpu[job_id] = _CpuSample(wall, cpu)
            return 0.0
        if wall > last.wall:
            last.usage = max(0.0, (cpu - last.cpu) / (wall - last.wall))
            last.wall, last.cpu = wall, cpu
        return round(last.usage, 6)

    def _live_jobs(self) -> set[str]:
        return {job.job_id for job in self.jobs.running.values()}
