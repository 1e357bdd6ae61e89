"""Streamed output (`stream_output = true`, `stream_error = true`): the job's stdout and
stderr reach the submit side's Out/Err while it runs, on `execd run` as on the pool's
own condor_startd (whose starter writes them there with the shadow's remote open,
lseek, write, fsync, close).

The first job prints a line on each stream, then waits for a marker in the shared
/tmp that the test creates only once it has read that line in the submit side's output
file; then it prints more and exits 3. Without streaming the line arrives only after
the job's end, so the job would time out waiting (and print that it did). The second
job writes several MB to its stdout: the file must hold exactly those bytes (on
condor_startd, a prefix of them: it was seen to lose the stream's last ~37 kB).
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, pool_node, submit_files
from test_shadow_pool import restart_schedd

WAITING = """#!/bin/sh
echo first line
echo first error >&2
i=0
while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
if [ -e "$1" ]; then echo marker seen; else echo marker not seen; fi
echo last error >&2
exit 3
"""
LINES = 800_000  # seq's lines: about 5.4 MB
BULK = f"#!/bin/sh\nseq 1 {LINES}\nseq 1 1000 >&2\n"
SUBMIT = ("executable = job.sh\n{args}output = out.txt\nerror = err.txt\nlog = job.log\n"
          "stream_output = true\nstream_error = true\nshould_transfer_files = YES\n"
          "when_to_transfer_output = ON_EXIT\nrequest_memory = 64\nqueue\n")  # fmt: skip


def ended(log: str) -> str:
    return next(line.strip() for line in log.splitlines() if "termination" in line)


def streamed_while_running(pool: harness.Pool) -> tuple[object, ...]:
    """(first line seen while the job ran, out.txt, err.txt, its end, its user log's
    events, the files in its directory)."""
    with tempfile.TemporaryDirectory(prefix="execd-stream-", dir="/tmp") as shared:
        os.chmod(shared, 0o755)
        marker = Path(shared) / "go"
        job = submit_files(pool, SUBMIT.format(args=f"arguments = {marker}\n"),
                           {"job.sh": WAITING})  # fmt: skip
        out = job.host_dir / "out.txt"
        harness.wait_for("the job's first line in out.txt",
                         lambda: out.exists() and "first line" in out.read_text(), WAIT_S)
        # The job waits for the marker: it is still running (no end in its log).
        running = "005" not in job.events() and "first error" in job.output("err.txt")
        marker.write_text("")
        log = job.wait_for_event("005", WAIT_S)
        return (running, job.output("out.txt"), job.output("err.txt"), ended(log),
                job.events(), sorted(p.name for p in job.host_dir.iterdir()))


def bulk(pool: harness.Pool) -> tuple[object, ...]:
    job = submit_files(pool, SUBMIT.format(args=""), {"job.sh": BULK})
    log = job.wait_for_event("005", WAIT_S)
    return ((job.host_dir / "out.txt").read_bytes(), job.output("err.txt"), ended(log),
            job.events(), sorted(p.name for p in job.host_dir.iterdir()))


def test_streamed_output_arrives_while_the_job_runs_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, streamed_while_running)
    assert ours == theirs
    assert ours[:4] == (True, "first line\nmarker seen\n", "first error\nlast error\n",
                        "(1) Normal termination (return value 3)")  # fmt: skip


def test_megabytes_of_streamed_output_arrive_whole_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, bulk)
    expected = "".join(f"{i}\n" for i in range(1, LINES + 1)).encode()
    assert len(ours[0]) == len(expected)
    assert ours[0] == expected
    # condor_startd 25.14.1 now and then loses the stream's end (seen: 5,451,776 of
    # 5,488,895 bytes): what it delivers is still the job's bytes, from the start.
    assert expected.startswith(theirs[0]) and len(theirs[0]) > len(expected) // 2
    assert ours[1:] == theirs[1:]
    assert ours[1] == "".join(f"{i}\n" for i in range(1, 1001))
    assert ours[2] == "(1) Normal termination (return value 0)"


def through_schedd_restart(pool: harness.Pool) -> tuple[object, ...]:
    """The waiting job; once its first line is on the submit side, condor_restart
    -schedd: the new shadow reconnects (023), then the job goes on (released) and its
    stream is written by the new shadow (the file opened again, not truncated)."""
    with tempfile.TemporaryDirectory(prefix="execd-stream-", dir="/tmp") as shared:
        os.chmod(shared, 0o755)
        marker = Path(shared) / "go"
        job = submit_files(pool, SUBMIT.format(args=f"arguments = {marker}\n"),
                           {"job.sh": WAITING})  # fmt: skip
        out = job.host_dir / "out.txt"
        harness.wait_for("the job's first line in out.txt",
                         lambda: out.exists() and "first line" in out.read_text(), WAIT_S)
        restart_schedd(pool, job)
        job.wait_for_event("023", WAIT_S)
        marker.write_text("")
        log = job.wait_for_event("005", WAIT_S)
        return (job.output("out.txt"), job.output("err.txt"), ended(log),
                [e for e in job.events() if e != "006"])


def test_streamed_output_goes_on_after_the_shadows_reconnect_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, through_schedd_restart)
    assert ours[:3] == ("first line\nmarker seen\n", "first error\nlast error\n",
                        "(1) Normal termination (return value 3)")  # fmt: skip
    assert ours[3][-3:] == ["022", "023", "005"]
    assert ours[2:] == theirs[2:]
    # condor_starter 25.14.1 writes the last piece it wrote before the reconnect once
    # more after it (StreamHandler::Reconnect re-sends `pending`, which a successful
    # write never clears, at the offset already past it): each file has it twice.
    assert theirs[:2] in (ours[:2], ("first line\nfirst line\nmarker seen\n",
                                     "first error\nfirst error\nlast error\n"))


def unopenable(pool: harness.Pool) -> tuple[object, ...]:
    """Submitted held; its output's directory removed, then released: the shadow
    cannot open `gone/out.txt`, so the job is held before it runs."""
    job = submit_files(pool, SUBMIT.replace("output = out.txt", "output = gone/out.txt")
                       .format(args="hold = true\n"), {"job.sh": WAITING, "gone/keep": ""})
    (job.host_dir / "gone" / "keep").unlink()
    (job.host_dir / "gone").rmdir()
    pool.tool("condor_release", str(job.cluster), user=harness.SUBMITTER).check()
    harness.wait_for("the job held again",
                     lambda: (ad := job.ad()) is not None and ad.get("HoldReasonCode") == 9,
                     WAIT_S)  # fmt: skip
    held = job.ad()
    assert held is not None
    reason = str(held["HoldReason"])  # "Error from slot1_1@HOST: ..."
    pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER).check()
    return (held["HoldReasonCode"], held["HoldReasonSubCode"], reason.split("@", 1)[0],
            reason.split(":", 1)[-1], [e for e in job.events() if e != "006"])


def test_an_output_stream_the_shadow_cannot_open_holds_the_job_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, theirs = on_both(running_pool, unopenable)
    assert ours == theirs
    assert ours[:4] == (9, 0, "Error from slot1_1", " unable to establish standard output stream")


RESTARTED = """#!/bin/sh
echo first line
i=0
while [ ! -e "$1" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done
seq 1 300000
echo done >&2
exit 3
"""


def test_streamed_output_goes_on_through_execds_restart_in_place(pool: harness.Pool) -> None:
    """SIGUSR2 while the job streams (released to write 2 MB as execd restarts): the
    FIFO's reading end, the shadow's descriptor and the offset go to the new image, the
    job is never without a reader (no SIGPIPE) and out.txt holds every byte once."""
    with tempfile.TemporaryDirectory(prefix="execd-stream-", dir="/tmp") as shared, \
            tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:  # fmt: skip
        os.chmod(shared, 0o755)
        marker = Path(shared) / "go"
        node = pool_node(pool, tmp)
        try:
            job = submit_files(pool, SUBMIT.format(args=f"arguments = {marker}\n"),
                               {"job.sh": RESTARTED})  # fmt: skip
            out = job.host_dir / "out.txt"
            harness.wait_for("the job's first line in out.txt",
                             lambda: out.exists() and out.read_text() == "first line\n",
                             WAIT_S)  # fmt: skip
            node.send(signal.SIGUSR2)
            marker.write_text("")  # the job writes while execd restarts
            node.wait_for("execd_stopped", how="restart")
            adopted = node.wait_for("stream_adopted", stream="stdout")
            assert adopted["offset"] >= len("first line\n"), adopted
            log = job.wait_for_event("005", WAIT_S)
            node.wait_for("shadow_job_exited")
        finally:
            node.stop(signal.SIGQUIT)
    assert out.read_text() == "first line\n" + "".join(f"{i}\n" for i in range(1, 300_001))
    assert job.output("err.txt") == "done\n"
    assert ended(log) == "(1) Normal termination (return value 3)"
