"""Jobs submitted with the real condor_submit run on execd: the real negotiator matches
execd's slot, the real schedd claims it, the real shadow activates it, and execd's
starter side (execd/wire/shadow.py) serves the shadow: syscalls, input transfer
(executable, files, a subdirectory), the job as a real process (as `nobody`, never
root), output transfer, job_exit. The user log and output files are the user's proof.

The same jobs on HTCondor's own startd (the reference EP, last in this module) end with
the same user-log events and termination lines; so does a job whose schedd restarts
while it runs (the new shadow reconnects through CA_CMD and the job completes).
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pool_harness as harness
import pytest
from static_slot_server import advertised_static_slot

from execd.wire.channel import Channel
from execd.wire.claim_messages import (
    RequestClaimReply,
    decode_activate_claim,
    decode_claim_only,
    decode_request_claim,
    encode_deactivate_reply,
    encode_request_claim_reply,
)
from execd.wire.commands import Command, Reply
from execd.wire.server import Peer, ServerSecurity
from execd.wire.shadow import ShadowOptions, serve_shadow
from execd.wire.shadow_link import ShadowLinks, serve_ca_command

WAIT_S = 90
SCRIPT = """#!/bin/sh
# Reads its inputs, writes outputs, ends as asked: exit N or die by signal N.
cat in.txt
cat data/sub.txt > result.txt
echo "args: $*" >> result.txt
id -u > uid.txt
echo oops >&2
case "$1" in
  exit) exit "$2" ;;
  signal) kill -"$2" $$ ;;
  sleep) sleep "$2" ;;
esac
"""
SUBMIT = """\
executable = job.sh
arguments = {args}
transfer_input_files = in.txt, data
output = out.txt
error = err.txt
log = job.log
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = 64
queue
"""
FILES = {"job.sh": SCRIPT, "in.txt": "input one\n", "data/sub.txt": "from a subdirectory\n"}
TERMINATION = re.compile(r"\((?:Normal|Abnormal) termination \((?:return value|signal) \d+\)\)|"
                         r"(?:Normal|Abnormal) termination \((?:return value|signal) \d+\)")


def _write_inputs(job_dir: Path, uid: int, gid: int) -> None:
    for name, text in FILES.items():
        path = job_dir / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        os.chmod(path, 0o755 if name.endswith(".sh") else 0o644)
        for p in (path, path.parent):
            os.chown(p, uid, gid)


def submit(pool: harness.Pool, args: str, *, unreadable: str = "", shebang: str = "",
           extra: str = "") -> harness.SubmittedJob:  # fmt: skip
    """condor_submit of SUBMIT with FILES, as the pool's non-root submitter."""
    pool._jobs += 1
    job_dir = pool.host_path(f"/home/{harness.SUBMITTER}/job{pool._jobs}")
    job_dir.mkdir(parents=True)
    uid, gid = pool._chroot_ids(harness.SUBMITTER)
    os.chown(job_dir, uid, gid)
    (job_dir / "job.sub").write_text(SUBMIT.format(args=args).replace("queue", extra + "queue"))
    _write_inputs(job_dir, uid, gid)
    if shebang:  # an interpreter that does not exist: the job cannot be started
        script = job_dir / "job.sh"
        script.write_text(shebang + "\n" + script.read_text().split("\n", 1)[1])
    chroot_dir = f"/home/{harness.SUBMITTER}/job{pool._jobs}"
    out = pool.tool("condor_submit", "-terse", "job.sub", user=harness.SUBMITTER, cwd=chroot_dir)
    if unreadable:  # after condor_submit checked it: the shadow cannot read it
        os.chmod(job_dir / unreadable, 0)
    return harness.SubmittedJob(pool, int(out.check().stdout.split()[0].split(".")[0]), job_dir)


@asynccontextmanager
async def execd_slot(pool: harness.Pool, execute_dir: Path) -> AsyncIterator[list[str]]:
    """A static slot served by execd's wire server and starter side; yields the log of
    commands it served."""
    served: list[str] = []
    claims: dict[str, str] = {}
    links = ShadowLinks()

    async def request_claim(channel: Channel, command: int, peer: Peer) -> None:
        decode_request_claim(channel.decoder(await channel.recv()))
        served.append("REQUEST_CLAIM")
        await channel.send(encode_request_claim_reply(channel.encoder(),
                                                      RequestClaimReply(Reply.OK)).payload())

    async def activate_claim(channel: Channel, command: int, peer: Peer) -> None:
        act = decode_activate_claim(channel.decoder(await channel.recv()))
        served.append("ACTIVATE_CLAIM")
        await channel.send(channel.encoder().put_int(Reply.OK).payload())
        options = ShadowOptions(execute_dir=execute_dir, slot_name=claims["name"],
                                uid_domain="execd.test", links=links,
                                update_interval_s=harness.INTERVAL_S)  # fmt: skip
        try:
            await serve_shadow(channel, act.claim_id, act.job_ad, options=options)
            served.append("JOB_DONE")
        except Exception as exc:
            served.append(f"FAILED {exc}")
            raise

    async def deactivate(channel: Channel, command: int, peer: Peer) -> None:
        decode_claim_only(channel.decoder(await channel.recv()), "DEACTIVATE_CLAIM")
        served.append(Command(command).name)
        await channel.send(encode_deactivate_reply(channel.encoder(), True).payload())

    async def ca_command(channel: Channel, command: int, peer: Peer) -> None:
        served.append("CA_CMD")  # the new shadow's CA_LOCATE_STARTER, CA_RECONNECT_JOB
        await serve_ca_command(channel, peer, links)

    async def release(channel: Channel, command: int, peer: Peer) -> None:
        decode_claim_only(channel.decoder(await channel.recv()), "RELEASE_CLAIM")
        served.append("RELEASE_CLAIM")

    security = ServerSecurity(domain="execd.test", timeout_s=20)
    handlers = {Command.REQUEST_CLAIM: request_claim, Command.ACTIVATE_CLAIM: activate_claim,
                Command.RELEASE_CLAIM: release, Command.CA_CMD: ca_command}  # fmt: skip
    for ending in (Command.DEACTIVATE_CLAIM, Command.DEACTIVATE_CLAIM_FORCIBLY,
                   Command.DEACTIVATE_CLAIM_JOB_DONE):  # fmt: skip
        handlers[ending] = deactivate
    async with advertised_static_slot(pool, handlers, security) as (_claim, name):
        claims["name"] = name
        yield served


def termination(log: str) -> str:
    found = TERMINATION.search(log)
    assert found, log
    return found.group(0).strip("()") if found.group(0).startswith("((") else found.group(0)


Action = Callable[[harness.Pool, harness.SubmittedJob], None]


def run_on_execd(pool: harness.Pool, args: str, *, unreadable: str = "", until: str = "005",
                 shebang: str = "", during: Action | None = None, extra: str = "",
                 ) -> tuple[harness.SubmittedJob, list[str]]:  # fmt: skip
    execute_dir = Path(tempfile.mkdtemp(prefix="execd-shadow-", dir="/var/tmp"))
    os.chmod(execute_dir, 0o755)

    async def run() -> tuple[harness.SubmittedJob, list[str]]:
        job = await asyncio.to_thread(submit, pool, args, unreadable=unreadable,
                                      shebang=shebang, extra=extra)  # fmt: skip
        try:
            async with execd_slot(pool, execute_dir) as served:
                if during is not None:
                    await asyncio.to_thread(during, pool, job)
                await asyncio.to_thread(job.wait_for_event, until, WAIT_S)
                if until == "012":
                    held = await asyncio.to_thread(job.ad)
                    assert held is not None
                    served.append(f"HELD {held['HoldReasonCode']} {held['HoldReasonSubCode']}")
                    (job.host_dir / "hold.txt").write_text(
                        f"{held['HoldReasonCode']} {held['HoldReasonSubCode']} "
                        f"{held['HoldReason']}")  # fmt: skip
                return job, served
        finally:
            await asyncio.to_thread(pool.tool, "condor_rm", str(job.cluster),
                                    user=harness.SUBMITTER)  # fmt: skip

    try:
        return asyncio.run(run())
    finally:
        os.rmdir(execute_dir)  # empty: every sandbox was removed


def test_job_runs_on_execd_with_input_and_output_transferred(pool: harness.Pool) -> None:
    job, served = run_on_execd(pool, "exit 0")
    assert served[:2] == ["REQUEST_CLAIM", "ACTIVATE_CLAIM"] and "JOB_DONE" in served, served
    log = job.user_log()
    assert "Normal termination (return value 0)" in log
    assert job.events()[0] == "000" and job.events()[-1] == "005"
    assert job.output("out.txt") == "input one\n"  # stdout, with stdin's input file
    assert job.output("err.txt") == "oops\n"
    assert job.output("result.txt") == "from a subdirectory\nargs: exit 0\n"
    assert job.output("uid.txt") == "65534\n"  # never root: nobody here
    # the sandbox was removed: run_on_execd's os.rmdir of its execute dir says so (a
    # glob over /var/tmp would see other sessions' sandboxes)


@pytest.mark.parametrize(("args", "line"), [
    ("exit 3", "Normal termination (return value 3)"),
    ("signal 9", "Abnormal termination (signal 9)"),
])  # fmt: skip
def test_non_zero_exit_and_signal_death(pool: harness.Pool, args: str, line: str) -> None:
    job, _ = run_on_execd(pool, args)
    assert termination(job.user_log()) == line
    assert job.output("out.txt") == "input one\n"


def run_on_condor_startd(pool: harness.Pool, args: str, *, unreadable: str = "",
                         until: str = "005", shebang: str = "",
                         during: Action | None = None, extra: str = "",
                         wait_s: float = WAIT_S) -> harness.SubmittedJob:  # fmt: skip
    """Submit the job, wait for `until` in its user log (recording a hold's code and
    reason in hold.txt), remove it; whichever execute point the pool has runs it."""
    job = submit(pool, args, unreadable=unreadable, shebang=shebang, extra=extra)
    try:
        if during is not None:
            during(pool, job)
        job.wait_for_event(until, wait_s)
        if until == "012":
            held = job.ad()
            assert held is not None
            (job.host_dir / "hold.txt").write_text(
                f"{held['HoldReasonCode']} {held['HoldReasonSubCode']} {held['HoldReason']}")
    finally:
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)
    return job


# (arguments, input file made unreadable after submit, the event that ends the case,
#  the script's first line if not the usual one)
CASES = [("exit 0", "in.txt", "012", ""), ("exit 0", "", "012", "#!/nonexistent/sh"),
         ("exit 0", "", "005", ""), ("exit 3", "", "005", ""),
         ("signal 9", "", "005", "")]  # fmt: skip


def test_same_user_log_as_condor_startd(running_pool: harness.RunningPool) -> None:
    """Events, termination lines and output files: execd against HTCondor's startd."""
    # A pool restart wipes the submitter's job directories: keep what each job left.
    ours = [outcome(run_on_execd(running_pool.get(with_startd=False), a, unreadable=u,
                                 until=e, shebang=b)[0]) for a, u, e, b in CASES]  # fmt: skip
    reference = running_pool.get(with_startd=True)
    theirs = [outcome(run_on_condor_startd(reference, a, unreadable=u, until=e, shebang=b))
              for a, u, e, b in CASES]  # fmt: skip
    for case, mine, real in zip(CASES, ours, theirs, strict=True):
        assert mine[:-1] == real[:-1], (case, mine, real)


def outcome(job: harness.SubmittedJob) -> tuple[list[str], str, dict[str, str], str]:
    """What the user sees: event codes, the termination line or the hold's code and
    subcode, the output files; last the whole hold reason (for the failure message)."""
    hold = job.host_dir / "hold.txt"
    if hold.exists():
        code, sub, reason = hold.read_text().split(" ", 2)
        # Whether the shadow logs the end of the failure-file transfer (040) before the
        # starter's error arrives is a race on HTCondor's own startd too: not compared.
        # Nor is the abort (009) of the test's own condor_rm of the held job, which the
        # schedd may or may not have written when the log is read.
        events = [e for e in job.events() if e not in ("040", "009")]
        reason = re.sub(r"execution point \S+\.", "execution point SLOT.", reason)
        reason = re.sub(r"/job\d+/", "/jobN/", reason)
        reason = re.sub(r"^Error from \S+:", "Error from SLOT:", reason)
        reason = re.sub(r"'/[^']*/job.sh'", "'SANDBOX/job.sh'", reason)
        return events, f"held {code} {sub} {reason}", {}, job.user_log()
    files = {n: job.output(n) for n in ("out.txt", "err.txt", "result.txt")}
    return job.events(), termination(job.user_log()), files, ""


def test_unreadable_input_file_holds_the_job(pool: harness.Pool) -> None:
    """The shadow cannot read an input file: the job goes on hold with HTCondor's code
    for an input transfer failure (13) and the errno (EACCES)."""
    job, served = run_on_execd(pool, "exit 0", unreadable="in.txt", until="012")
    assert "HELD 13 13" in served, served
    assert "005" not in job.events() and "001" not in job.events()
    assert "Permission denied" in job.user_log()


def restart_schedd(pool: harness.Pool, job: harness.SubmittedJob) -> None:
    """Once the job runs: condor_restart -schedd. The schedd's graceful shutdown kills
    the shadow and leaves a job with a lease (JobLeaseDuration) running; the restarted
    schedd's new shadow locates the starter and reconnects to it."""
    job.wait_for_event("001", WAIT_S)
    pool.tool("condor_restart", "-schedd").check()


def reconnect_outcome(job: harness.SubmittedJob) -> tuple[list[str], str, dict[str, str]]:
    # 006 (image size) events follow the memory the starter happens to measure when
    # the new shadow gets its first update: not part of the comparison.
    files = {n: job.output(n) for n in ("out.txt", "err.txt", "result.txt")}
    return [e for e in job.events() if e != "006"], termination(job.user_log()), files


def test_a_schedd_restart_mid_job_reconnects_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The job runs on execd through the schedd's restart: the new shadow's CA_CMDs
    (locate, reconnect) reach execd, the job is not killed, and its user log, exit and
    output files are those of the same job on HTCondor's own startd."""
    job, served = run_on_execd(running_pool.get(with_startd=False), "sleep 25",
                               during=restart_schedd)  # fmt: skip
    ours = reconnect_outcome(job)
    assert served.count("ACTIVATE_CLAIM") == 1 and served.count("CA_CMD") == 2, served
    assert "JOB_DONE" in served, served
    assert ours[0][-3:] == ["022", "023", "005"], job.user_log()
    assert "Job reconnected to" in job.user_log()
    reference = running_pool.get(with_startd=True)
    theirs = reconnect_outcome(run_on_condor_startd(reference, "sleep 25", during=restart_schedd))
    assert ours == theirs, (ours, theirs)


LEASE_S = 20
SCRATCH = re.compile(r'CondorScratchDir = "([^"]+)"')


def schedd_away_past_the_lease(pool: harness.Pool, job: harness.SubmittedJob) -> None:
    """Once the job runs: condor_off -schedd (the shadow dies, the job is left running),
    until the starter gives the job up after its lease and removes its scratch
    directory; then condor_on -schedd. The schedd does not try to reconnect a job whose
    lease ran out: it runs the job again from the start (a second 001)."""
    scratch = SCRATCH.search(job.wait_for_event("001", WAIT_S))
    assert scratch, job.user_log()
    where = Path(scratch.group(1))
    where = where if where.exists() else pool.host_path(str(where))  # in the chroot
    assert where.exists(), where
    pool.tool("condor_off", "-schedd").check()
    harness.wait_for(f"the starter to give up the job after its {LEASE_S} s lease",
                     lambda: not where.exists(), WAIT_S)  # fmt: skip
    pool.tool("condor_on", "-schedd").check()
    harness.wait_for("the job to run again", lambda: job.events().count("001") == 2, WAIT_S)


def test_a_job_lease_that_runs_out_kills_the_job_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    """The schedd stays away longer than job_lease_duration: execd kills the job (as
    HTCondor's starter does), and the returning schedd runs it again from the start,
    with the same user-log events as on condor_startd."""
    extra = f"job_lease_duration = {LEASE_S}\n"
    job, served = run_on_execd(running_pool.get(with_startd=False), "sleep 300", extra=extra,
                               until="001", during=schedd_away_past_the_lease)  # fmt: skip
    assert any("did not reconnect within the job lease" in s for s in served), served
    assert served.count("ACTIVATE_CLAIM") == 2 and "CA_CMD" not in served, served
    reference = running_pool.get(with_startd=True)
    theirs = run_on_condor_startd(reference, "sleep 300", extra=extra, until="001",
                                  during=schedd_away_past_the_lease)  # fmt: skip
    assert until_the_second_start(job) == until_the_second_start(theirs), (job.user_log(),
                                                                         theirs.user_log())


def until_the_second_start(job: harness.SubmittedJob) -> list[str]:
    """Event codes up to the job's second 001 (what follows is the test's condor_rm)."""
    events = [e for e in job.events() if e != "006"]
    second = [i for i, e in enumerate(events) if e == "001"][1]
    return events[: second + 1]
