"""A pool-claimed slot's job and claim attributes, with condor_startd's timing: the claim's
from REQUEST_CLAIM on; the request ad's job attributes until the first activation; the
job's (JobId, StarterPid, the starter's measurements and updates) from its activation
until its starter exits; PublicClaimId (never the secret) while Claimed; NumPids always.
The pool tier compares them with condor_startd's (tests/pool/test_pool_job_attrs.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.job import Job
from execd.daemon.pool_job_attrs import (
    JobAttributes,
    public_claim_id,
    sandbox_usage,
    starter_update,
)
from execd.machine.hostname import client_machine
from tests.unit.policy_helpers import Driver

REQUEST = {"Owner": "alice", "User": "alice@vm", "ScheddName": "vm", "JobUniverse": 5,
           "ExecutableSize": 1, "ImageSize": 2, "DiskUsage": 3, "ClusterId": 7, "ProcId": 0,
           "GlobalJobId": "vm#7.0#1700000000", "RemoteNegotiatingGroup": "<none>",
           "RemoteAutoregroup": False, "Cmd": "/bin/sleep"}  # fmt: skip
CLAIM_ONLY = {"NumPids", "RemoteScheddName", "ClientMachine", "RemoteNegotiatingGroup",
              "RemoteAutoregroup", "PublicClaimId", "ClaimEndTime"}  # fmt: skip


@dataclass
class Jobs:
    """What JobAttributes reads of the JobManager: running jobs and their workdirs."""

    root: Path
    running: dict[str, Job] = field(default_factory=dict)

    def workdir(self, job_id: str) -> Path:
        return self.root / job_id


def settings(text: str) -> Settings:
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def status(jobs: Jobs, job_id: str, **values: Any) -> None:
    (jobs.root / job_id).mkdir(parents=True, exist_ok=True)
    (jobs.root / job_id / "status.json").write_text(json.dumps(values))


def test_the_public_claim_id_has_no_secret() -> None:
    claim = Driver().ids.new()
    public = public_claim_id(claim)
    assert public == "<10.0.0.1:9618>#1700000000#1#..."
    assert claim.secret not in public


def test_client_machine_is_a_dotted_name_or_the_address() -> None:
    # this host's resolver: 127.0.0.1 is localhost, a name without a dot
    assert client_machine("127.0.0.1:40000") == "127.0.0.1"
    assert client_machine("127.0.0.1:40000", default_domain="pool.example") \
        == "localhost.pool.example"  # fmt: skip
    assert client_machine("192.0.2.7:9618", no_dns=True, default_domain="pool.example") \
        == "192-0-2-7.pool.example"  # fmt: skip
    assert client_machine("192.0.2.7:9618", no_dns=True) == "192.0.2.7"


def test_sandbox_usage_counts_entries_and_file_bytes_without_following_links(
        tmp_path: Path) -> None:  # fmt: skip
    (tmp_path / "a").write_bytes(b"x" * 1000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "b").write_bytes(b"y" * 2000)
    os.symlink("/etc/passwd", tmp_path / "link")
    assert sandbox_usage(tmp_path) == (3000, 4)


def test_sandbox_usage_counts_links_without_stating_or_descending_them(
        tmp_path: Path) -> None:  # fmt: skip
    # The daemon walks as root on its event loop: a link is one entry whatever it leads
    # to, never stat'd (a dangling link and a loop count, as on main) and a link to a
    # directory is not descended (its files are neither counted nor sized).
    (tmp_path / "a").write_bytes(b"x" * 1000)
    outside = tmp_path.parent / (tmp_path.name + "-outside")
    outside.mkdir()
    for i in range(5):
        (outside / f"f{i}").write_bytes(b"z" * 100)
    os.symlink(outside, tmp_path / "dirlink")
    os.symlink("/nonexistent/target", tmp_path / "dangling")
    os.symlink("loop", tmp_path / "loop")
    assert sandbox_usage(tmp_path) == (1000, 4)


def test_sandbox_usage_leaves_out_an_entry_whose_lstat_fails(tmp_path: Path) -> None:
    # A file whose path is past PATH_MAX: its directory is readable, its lstat by path
    # fails (ENAMETOOLONG); it is not counted, nor its size.
    (tmp_path / "a").write_bytes(b"x" * 1000)
    deep, levels = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY), 0
    try:
        # until the far file's path (directories + "/" + 250 characters) is past PATH_MAX
        while len(str(tmp_path)) + levels * 201 + 251 < 4096:
            os.mkdir("d" * 200, dir_fd=deep)
            below = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=deep)
            os.close(deep)
            deep, levels = below, levels + 1
        with open(os.open("f" * 250, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=deep),
                  "wb") as far:  # fmt: skip
            far.write(b"y" * 5000)
    finally:
        os.close(deep)
    far_path = str(tmp_path) + ("/" + "d" * 200) * levels + "/" + "f" * 250
    with pytest.raises(OSError, match="too long"):
        os.lstat(far_path)
    # a and the directories; not the far file
    assert sandbox_usage(tmp_path) == (1000, 1 + levels)


def test_a_starter_update_has_the_sandbox_only_with_file_transfer(tmp_path: Path) -> None:
    (tmp_path / "_condor_stdout").write_text("started\n")
    os.utime(tmp_path / "_condor_stdout", (1700000100, 1700000100))
    measured = {"JobPid": 42, "NumProcesses": 2, "ImageSize": 900, "ResidentSetSize": 800}
    update = starter_update(measured, 1700000000, False, tmp_path,
                            ("_condor_stdout", "_condor_stderr"))  # fmt: skip
    assert {k: update[k] for k in ("JobPid", "NumPids", "ImageSize", "ResidentSetSize",
                                   "DiskUsage", "ScratchDirFileCount", "StdoutMtime")} == {
        "JobPid": 42, "NumPids": 2, "ImageSize": 900, "ResidentSetSize": 800,
        "DiskUsage": 1, "ScratchDirFileCount": 1, "StdoutMtime": 1700000100}
    assert "StderrMtime" not in update  # no such file
    assert str(update["MemoryUsage"]) == "((ResidentSetSize + 1023) / 1024)"
    shared_fs = starter_update(measured, 1700000000, False, None, ("", ""))
    assert not {"DiskUsage", "ScratchDirFileCount", "StdoutMtime"} & set(shared_fs)


def test_a_starter_update_reports_cpu_in_whole_seconds_truncated() -> None:
    # condor_starter's ProcFamilyUsage counts whole seconds (usage_usec / 1000000)
    measured = {"RemoteUserCpu": 2.999999, "RemoteSysCpu": 0.5}
    update = starter_update(measured, 1700000000, False, None, ("", ""))
    assert (update["RemoteUserCpu"], update["RemoteSysCpu"]) == (2.0, 0.0)
    assert isinstance(update["RemoteUserCpu"], float)  # a real in the ad, as condor's
    assert starter_update({"RemoteUserCpu": 7.0}, 0, False, None, ("", ""))[
        "RemoteUserCpu"] == 7.0


def test_stdio_mtimes_are_left_out_for_a_symlink_or_a_non_file(tmp_path: Path) -> None:
    far = tmp_path / "far"
    far.write_text("root's\n")
    os.utime(far, (1600000000, 1600000000))
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "_condor_stdout").symlink_to(far)  # the job's link to a path it cannot read
    (sandbox / "_condor_stderr").mkdir()
    update = starter_update({}, 1700000000, False, sandbox, ("_condor_stdout", "_condor_stderr"))
    assert "StdoutMtime" not in update  # the target's mtime is not stat'ed as root
    assert "StderrMtime" not in update


def test_a_starter_update_has_block_io_only_where_measured(tmp_path: Path) -> None:
    block = {"BlockReadKbytes": 4096, "BlockWriteKbytes": 8192, "BlockReads": 3,
             "BlockWrites": 5}  # fmt: skip
    measured = starter_update({"JobPid": 7, **block}, 1700000000, False, None, ("", ""))
    assert {k: measured[k] for k in block} == block
    unmeasured = starter_update({"JobPid": 7}, 1700000000, False, None, ("", ""))
    assert not set(block) & set(unmeasured)  # not 0: left out


def test_attributes_through_a_claims_life(tmp_path: Path) -> None:
    d, jobs = Driver(), Jobs(tmp_path)
    attrs = JobAttributes(jobs, lambda: settings("STARTD_JOB_ATTRS = Cmd"))  # type: ignore[arg-type]
    assert attrs.attributes(d.slot) == {"NumPids": 0}  # unclaimed

    assert d.claim(REQUEST)
    claim = d.slot.claim.id
    attrs.claimed(claim, "submit.pool.example")
    idle = attrs.attributes(d.slot)  # Claimed/Idle: the request ad's job attributes
    assert idle == {"NumPids": 0, "RemoteScheddName": "vm", "ClientMachine": "submit.pool.example",
                    "RemoteNegotiatingGroup": "<none>", "RemoteAutoregroup": False,
                    "ImageSize": 2, "ExecutableSize": 1, "JobUniverse": 5, "DiskUsage": 3,
                    "Cmd": "/bin/sleep", "PublicClaimId": public_claim_id(claim),
                    "ClaimEndTime": 0}  # fmt: skip

    assert d.activate(REQUEST)
    job = Job("job-1", "slot1", claim, dict(REQUEST), handle=SimpleNamespace(pid=4242))  # type: ignore[arg-type]
    jobs.running["slot1"] = job
    status(jobs, "job-1", ImageSize=5000, RemoteWallClockTime=10.0, RemoteUserCpu=1.0)
    busy = attrs.attributes(d.slot)
    assert {k: busy[k] for k in ("JobId", "GlobalJobId", "StarterPid", "ImageSize")} == {
        "JobId": "7.0", "GlobalJobId": "vm#7.0#1700000000", "StarterPid": 4242,
        "ImageSize": 5000}  # the startd's own measurement, not the job ad's
    assert "JobPid" not in busy and "ResidentSetSize" not in busy  # no update yet
    assert busy["CPUsUsage"] == 0.0
    status(jobs, "job-1", ImageSize=5000, RemoteWallClockTime=14.0, RemoteUserCpu=3.0)
    assert attrs.attributes(d.slot)["CPUsUsage"] == 0.5  # 2 CPU seconds in 4 s

    attrs.updated(claim.full(), "job-1", {"JobPid": 99, "NumPids": 3, "ResidentSetSize": 700,
                                          "DiskUsage": 12, "StdoutMtime": 1700000005})
    updated = attrs.attributes(d.slot)
    assert {k: updated[k] for k in ("JobPid", "NumPids", "ResidentSetSize", "DiskUsage",
                                    "StdoutMtime")} == {
        "JobPid": 99, "NumPids": 3, "ResidentSetSize": 700, "DiskUsage": 12,
        "StdoutMtime": 1700000005}

    del jobs.running["slot1"]  # the starter exited; the claim idles
    d.starter_exited()
    assert d.pair == "Claimed/Idle"
    after = attrs.attributes(d.slot)
    assert set(after) == CLAIM_ONLY and after["NumPids"] == 3  # the last update's count
    assert claim.secret not in json.dumps(after)

    attrs.forget(claim.full())
    d.do(d.engine.release("slot1", d.clock.now()))
    assert attrs.attributes(d.slot) == {"NumPids": 0}


def test_a_preempting_slot_keeps_its_job_but_publishes_no_claim_id(tmp_path: Path) -> None:
    d, jobs = Driver(), Jobs(tmp_path)
    attrs = JobAttributes(jobs, lambda: settings(""))  # type: ignore[arg-type]
    d.busy(REQUEST)
    claim = d.slot.claim.id
    jobs.running["slot1"] = Job("job-1", "slot1", claim, dict(REQUEST))
    d.do(d.engine.release("slot1", d.clock.now()))
    assert d.slot.state.value == "Preempting"
    published = attrs.attributes(d.slot)
    assert published["JobId"] == "7.0" and published["JobUniverse"] == 5
    assert "PublicClaimId" not in published and "ClaimEndTime" not in published


def test_a_reload_changes_what_startd_job_attrs_copies(tmp_path: Path) -> None:
    d, jobs = Driver(), Jobs(tmp_path)
    current = [settings("")]
    attrs = JobAttributes(jobs, lambda: current[0])  # type: ignore[arg-type]
    assert d.claim(REQUEST)
    assert "Cmd" not in attrs.attributes(d.slot)
    current[0] = settings("STARTD_JOB_ATTRS = Cmd, NoSuchAttr")
    published = attrs.attributes(d.slot)
    assert published["Cmd"] == "/bin/sleep" and "NoSuchAttr" not in published
