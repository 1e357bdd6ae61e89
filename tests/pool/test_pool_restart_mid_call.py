"""`execd restart` (in place) while a job makes shadow calls all the time: the calls
are quiesced first (execd.wire.call_turns), so the shadow's connection goes to the next
image between two messages and the job runs once.

The job streams its stdout (each piece is a CONDOR_lseek and a CONDOR_write on the
shadow's connection, the next one as soon as the shadow answered) in a tight loop
until the test's marker appears, while execd restarts three times. A restart that cut
a call in half dropped the connection: the shadow reconnected, but HTCondor 25's shadow
had unregistered its file transfer key, so the output transfer was refused
("transkey is invalid") and the job was requeued and run again (a second 001).
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import pool_node, submit_files

RESTARTS = 3
STREAMING = """#!/bin/sh
i=0
while [ ! -e "$1" ]; do i=$((i+1)); echo $i; done
echo done
echo finished >&2
"""
SUBMIT = ("executable = job.sh\narguments = {marker}\noutput = out.txt\nerror = err.txt\n"
          "log = job.log\nstream_output = true\nshould_transfer_files = YES\n"
          "when_to_transfer_output = ON_EXIT\nrequest_memory = 64\nqueue\n")  # fmt: skip


def test_a_job_streaming_all_the_time_runs_once_through_execds_restarts(
        pool: harness.Pool) -> None:  # fmt: skip
    transkey_before = pool.daemon_log("ShadowLog").count("transkey is invalid")
    with tempfile.TemporaryDirectory(prefix="execd-stream-", dir="/tmp") as shared, \
            tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:  # fmt: skip
        os.chmod(shared, 0o755)
        marker = Path(shared) / "go"
        node = pool_node(pool, tmp)
        try:
            job = submit_files(pool, SUBMIT.format(marker=marker), {"job.sh": STREAMING})
            out = job.host_dir / "out.txt"
            harness.wait_for("the job's stream in out.txt",
                             lambda: out.exists() and out.stat().st_size > 0, WAIT_S)
            handed = []
            for _ in range(RESTARTS):
                restarted = node.execd("restart")
                assert restarted.returncode == 0, restarted.stderr
                handed.append(node.wait_for("shadow_conversation_handed_over")["connection"])
                node.wait_for("execd_stopped", how="restart")
                node.wait_for("stream_adopted", stream="stdout")
                size = out.stat().st_size  # the stream goes on in the new image
                harness.wait_for("more of the stream",
                                 lambda size=size: out.stat().st_size > size, WAIT_S)
            marker.write_text("")
            log = job.wait_for_event("005", WAIT_S)
            node.wait_for("shadow_job_exited")
            quiesce_gave_up = [e for e in node.events()
                               if e["event"] == "shadow_call_not_quiesced"]  # fmt: skip
        finally:
            node.stop(signal.SIGQUIT)
    events = job.events()
    assert events.count("001") == 1, (events, log)  # run once: no requeue
    assert "022" not in events and "023" not in events, events  # never disconnected
    assert "Normal termination (return value 0)" in log, log
    assert pool.daemon_log("ShadowLog").count("transkey is invalid") == transkey_before
    assert handed == ["kept"] * RESTARTS and quiesce_gave_up == [], (handed, quiesce_gave_up)
    lines = out.read_text().split("\n")
    assert lines[-2:] == ["done", ""], lines[-3:]
    numbers = lines[:-2]
    assert numbers == [str(i) for i in range(1, len(numbers) + 1)]  # whole, each once
    assert job.output("err.txt") == "finished\n"
