"""A vanilla job submitted with condor_submit that goes over request_memory, on a kernel
with the memory controller (issue 10, 2(e)): held with code 34 and the same user-log
events and hold reason on execd as on HTCondor's own condor_startd of the same pool.

Both halves run the real pool (tests/pool/pool_harness.py) in this guest: first with
condor_startd as the execute point (the reference), then without it and with a real
`execd run` joined to it. The job writes its cgroup's memory limits to a directory
outside its sandbox before it allocates 300 MB with request_memory = 64; the kernel's
own memory.events says the OOM killer fired in the execute point's cgroup subtree.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from execd_node import running_node
from guest_pool import CGROUP_MOUNT, guest_pools, harness, user_log_view

REQUEST_MB = 64
# Software emulation: a pool's negotiation cycle, a transfer and an OOM take a while.
WAIT_S = 240
JOB = """#!/usr/bin/python3
# Writes its cgroup and the memory limits above it, then keeps 300 MB (request: 64).
import os, sys
probe = sys.argv[1]
cgroup = open("/proc/self/cgroup").read().split("::", 1)[1].strip()
limits, path = [], "/sys/fs/cgroup" + cgroup
while path != "/sys/fs/cgroup":
    try:
        limits.append(path + " " + open(path + "/memory.max").read().strip())
    except OSError as e:
        limits.append(path + " " + e.__class__.__name__)
    path = os.path.dirname(path)
with open(os.path.join(probe, "limits"), "w") as out:
    out.write("\\n".join(limits) + "\\n")
hoard = b"x" * (300 << 20)
print("not killed:", len(hoard))
"""
SUBMIT = f"""\
executable = oom.py
arguments = {{probe}}
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = {REQUEST_MB}
# the default (1 GB, at least) is more than the guest's tmpfs-backed execute dirs have
request_disk = 100MB
queue
"""


@dataclass(frozen=True)
class Outcome:
    """What the user and the kernel saw of one OOM job."""

    events: list[str]  # user-log event codes, in order
    summary: list[str]  # the user log as compared (user_log_summary)
    hold_code: int
    hold_subcode: int
    hold_reason: str  # normalized()
    allocated_mb: int | None  # the slot's Memory in the execute event (request, rounded up)
    execute_resources: list[list[str]]  # 001's lines: SlotName, CondorScratchDir, Cpus, ...
    resource_tables: list[tuple[str, list[tuple[str, str, str, str]]]]  # 004's, no usage
    limits: dict[str, int]  # cgroup path -> memory.max in bytes ("max" left out)
    oom_kills: int  # memory.events oom_kill of the job's top cgroup under the root
    user_log: str


@pytest.fixture(scope="module")
def pools() -> Iterator[harness.RunningPool]:
    holder = guest_pools()
    try:
        yield holder
    finally:
        holder.close()


def oom_kills(top: Path) -> int:
    """oom_kill of `top`'s memory.events: hierarchical, so it counts every kill in the
    subtree, even in cgroups removed since."""
    pairs = (line.split() for line in (top / "memory.events").read_text().splitlines())
    return {key: int(value) for key, value in pairs}["oom_kill"]


def allocated_memory(user_log: str) -> int | None:
    """The slot's `Memory = N` that the execute event (001) lists, if it does."""
    execute = re.search(r"^001 .*?^\.\.\.$", user_log, re.MULTILINE | re.DOTALL)
    found = re.search(r"^\tMemory = (\d+)$", execute.group(0) if execute else "", re.MULTILINE)
    return int(found.group(1)) if found else None


def normalized(text: str) -> str:
    """Text with the execute point's addresses and slot names replaced."""
    text = re.sub(r"<[^<>]*>", "<ADDRESS>", text)
    return re.sub(r"\bslot\d+(?:_\d+)?@[^\s:]+", "SLOT", text)


def user_log_summary(user_log: str) -> list[str]:
    """Each event's code and text, normalized, without its time. Left out: image-size
    updates (006: how many depends on timing), the eviction's usage figures (004: only
    its code line and reason are kept) and the bodies of the other events that do not
    carry the hold (addresses, sandbox paths, sizes)."""
    summary = []
    for block in user_log.split("...\n"):
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        code, _, _, _, text = lines[0].split(" ", 4)
        body = [line.strip() for line in lines[1:]]
        if code == "006":
            continue
        if code == "004":
            body = [line for line in body if line.startswith("Reason:")]
        elif code not in ("021", "012"):
            body = []
        summary.append(normalized(" | ".join([code, text, *body])))
    return summary


def run_oom_job(pool: harness.Pool) -> Outcome:
    """condor_submit the job, wait for its hold, and read what it left."""
    probe = Path(tempfile.mkdtemp(prefix="execd-oom-probe-", dir="/tmp"))
    probe.chmod(0o1777)  # the job writes here as its own user
    job = pool.submit(SUBMIT.format(probe=probe), {"oom.py": JOB})
    os.chmod(job.host_dir / "oom.py", 0o755)
    try:
        try:
            job.wait_for_event("012", WAIT_S)
        except harness.PoolError as exc:
            why = pool.tool("condor_q", "-better-analyze", str(job.cluster)).stdout
            raise AssertionError(f"{exc}\nuser log:\n{job.user_log()}\n{why}") from exc
        ad = job.ad()
        assert ad is not None, job.user_log()
        limits_text = (probe / "limits").read_text() if (probe / "limits").exists() else ""
        limits = {}
        for line in limits_text.splitlines():
            path, value = line.rsplit(" ", 1)
            if value.isdigit():  # not "max", nor a file that was not there
                limits[path] = int(value)
        assert limits_text, f"the job never wrote its limits; user log:\n{job.user_log()}"
        top = Path(limits_text.splitlines()[-1].rsplit(" ", 1)[0])  # below the root
        return Outcome(
            events=job.events(),
            summary=user_log_summary(job.user_log()),
            hold_code=int(ad["HoldReasonCode"]),
            hold_subcode=int(ad["HoldReasonSubCode"]),
            hold_reason=normalized(str(ad["HoldReason"])),
            allocated_mb=allocated_memory(job.user_log()),
            execute_resources=user_log_view.execute_resources(job.user_log()),
            resource_tables=user_log_view.resource_tables(job.user_log()),
            limits=limits,
            oom_kills=oom_kills(top),
            user_log=job.user_log(),
        )
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


@pytest.fixture(scope="module")
def reference(pools: harness.RunningPool) -> Outcome:
    """The job on HTCondor's own condor_startd, cgroups on (its defaults); also kept
    beside the guest's results (oom-reference.json) for whoever compares by hand."""
    outcome = run_oom_job(pools.get(with_startd=True))
    results = os.environ.get("EXECD_VM_RESULTS", "")
    if results:
        (Path(results) / "oom-reference.json").write_text(json.dumps(asdict(outcome), indent=1))
    return outcome


def test_condor_startd_holds_the_oom_job_with_code_34(reference: Outcome) -> None:
    assert reference.hold_code == 34, reference.hold_reason  # JobOutOfResources
    assert reference.hold_subcode == 102, reference.hold_reason  # memory
    # the limit is the slot's memory: the request rounded up (MODIFY_REQUEST_EXPR_...)
    assert reference.allocated_mb is not None and reference.allocated_mb >= REQUEST_MB
    limit = f"cgroup memory limit of {reference.allocated_mb} megabytes"
    assert limit in reference.hold_reason, reference.hold_reason
    assert min(reference.limits.values()) == reference.allocated_mb << 20, reference.limits
    # the slot's resources as the shadow has them from HTCondor's starter (what execd's
    # half is compared with): the execute event's lines and the eviction's table
    assert f"Memory = {reference.allocated_mb}" in reference.execute_resources[0], reference
    assert [code for code, _ in reference.resource_tables] == ["004"], reference.user_log
    assert reference.oom_kills >= 1
    # submitted, executing, the starter's error, evicted, held: never terminated (005)
    codes = [code for code in reference.events if code != "006"]
    assert codes[0] == "000" and codes[-3:] == ["021", "004", "012"], reference.user_log
    assert "001" in codes and "005" not in codes, reference.user_log
    assert "Code 34 Subcode 102" in reference.summary[-1], reference.summary


def test_execd_holds_the_oom_job_like_condor_startd(pools: harness.RunningPool,
                                                     reference: Outcome) -> None:
    """The same job on a real `execd run` joined to the pool without its startd: the
    same hold (34/102, HTCondor's words), user log (events, the execute event's slot
    resources, the eviction's resource table) and cgroup memory.max, under execd's
    own base cgroup, with the kernel's OOM kill counted there."""
    pool = pools.get(with_startd=False)
    with running_node(pool) as node:
        ours = run_oom_job(pool)
        base = Path(CGROUP_MOUNT) / node.base_cgroup
    assert reference.allocated_mb is not None
    assert ours.oom_kills >= 1
    assert min(ours.limits.values()) == reference.allocated_mb << 20, ours.limits
    assert all(path.startswith(f"{base}/") for path in ours.limits), (base, ours.limits)
    # every difference at once, each as (execd, condor_startd)
    differences = {
        name: (mine, theirs)
        for name, mine, theirs in (
            ("hold code", ours.hold_code, reference.hold_code),
            ("hold subcode", ours.hold_subcode, reference.hold_subcode),
            ("hold reason", ours.hold_reason, reference.hold_reason),
            ("slot memory in the execute event", ours.allocated_mb, reference.allocated_mb),
            ("execute event resources", ours.execute_resources, reference.execute_resources),
            ("resource tables", ours.resource_tables, reference.resource_tables),
            ("user log", ours.summary, reference.summary),
        )
        if mine != theirs
    }
    assert not differences, "\n".join(f"{k}:\n  execd:         {m!r}\n  condor_startd: {t!r}"
                                       for k, (m, t) in differences.items())
