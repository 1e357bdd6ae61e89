"""`condor_chirp` from inside a job (the starter's Chirp I/O proxy), on `execd run` and
on the pool's own condor_startd.

The job runs Debian's condor_chirp (the chroot's: inside the chroot on condor_startd,
through the chroot's own loader on execd's host) for set_job_attr, get_job_attr, ulog
and a few requests that must be refused, prints each one's output and exit code, and
exits 3. What the job printed, its exit code, the attributes in condor_history, and
the user log's generic events (008) must be the same on both execute points; with
and without `+WantIOProxy = true`.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, pool_node, submit_files

CHIRP_SETUP = """\
if [ -x /usr/libexec/condor/condor_chirp ]; then
    chirp() {{ /usr/libexec/condor/condor_chirp "$@"; }}
else
    R={root}
    chirp() {{ "$R/lib64/ld-linux-x86-64.so.2" \\
        --library-path "$R/usr/lib/x86_64-linux-gnu:$R/lib/x86_64-linux-gnu" \\
        "$R/usr/libexec/condor/condor_chirp" "$@"; }}
fi
step() {{ echo "== $*"; chirp "$@" 2>&1; echo "rc=$?"; }}
"""
SCRIPT = "#!/bin/sh\n" + CHIRP_SETUP + """\
echo "config=${{_CONDOR_CHIRP_CONFIG##*/}}"
[ -r "$_CONDOR_CHIRP_CONFIG" ] && echo "config readable"
step set_job_attr ChirpTestString '"hello world"'
step set_job_attr ChirpTestNumber 40+2
step get_job_attr ChirpTestString
step get_job_attr ChirpTestNumber
step get_job_attr Cmd
step get_job_attr NoSuchAttribute
step set_job_attr Owner '"mallory"'
step set_job_attr ClusterId 7
step set_job_attr ChirpTestBad '"unterminated'
step ulog "progress: half way there"
step ulog "{long}"
step set_job_attr_delayed ChirpDelayed '"later"'
step set_job_attr_delayed chirpDelayedNumber 6*7
step get_job_attr_delayed ChirpDelayed
step get_job_attr_delayed ChirpDelayedNumber
step get_job_attr_delayed Cmd
step get_job_attr_delayed NoSuchAttribute
step set_job_attr_delayed NotChirpPrefixed 1
step set_job_attr_delayed ChirpDelayedBad '"unterminated'
exit 3
"""
GENERIC = re.compile(r"^008 \(\d+\.\d+\.\d+\) \S+ \S+ (.*?)\n\.\.\.$", re.M | re.S)
ATTRS = ("ChirpTestString", "ChirpTestNumber", "Owner", "ClusterId", "ChirpTestBad",
         "ExitCode", "ChirpDelayed", "ChirpDelayedNumber", "NotChirpPrefixed",
         "ChirpDelayedBad")  # fmt: skip


def chirping_job(pool: harness.Pool, extra: str) -> tuple[str, dict[str, Any], list[Any]]:
    """(the job's stdout, its history attributes ATTRS, its 008 events' bodies)."""
    script = SCRIPT.format(root=pool.root, long="x" * 1100)
    job = submit_files(pool, PLAIN_SUBMIT.format(args="", extra=extra), {"job.sh": script})
    job.wait_for_event("005", WAIT_S)
    history = harness.wait_for("the job's history record", lambda: job.pool.history(job.cluster),
                               WAIT_S)  # fmt: skip
    record = history[0]
    values = {name: record.get(name) for name in ATTRS}
    values["Owner"] = values["Owner"] == harness.SUBMITTER  # unchanged
    values["ClusterId"] = values["ClusterId"] == job.cluster
    # The job's directory is numbered by its pool's own count of jobs, which differs
    # between the two when earlier tests submitted to one side only.
    out = re.sub(r"/job\d+/", "/jobN/", job.output("out.txt"))
    return out, values, generic_events(job.user_log())


def generic_events(user_log: str) -> list[str]:
    """Each generic event (008) as the user reads it, without its job id and time."""
    return [m.group(1) for m in GENERIC.finditer(user_log)]


def test_chirp_with_want_io_proxy_as_on_condor_startd(running_pool: harness.RunningPool) -> None:
    ours, condor = on_both(running_pool, lambda pool: chirping_job(pool, "+WantIOProxy = true"))
    out, values, generic = ours
    assert ours == condor
    # What the pair must show, besides being equal: the attributes set, read back,
    # protected ones refused, the ulog text in the user log.
    assert values["ChirpTestString"] == "hello world"
    assert values["ChirpTestNumber"] == "/Expr(40 + 2)/"
    assert values["Owner"] is True and values["ClusterId"] is True
    assert values["ExitCode"] == 3
    assert 'config=.chirp.config' in out and "config readable" in out
    assert '"hello world"' in out
    assert generic == ["progress: half way there", "x" * 1023]
    # Delayed updates reach the schedd with the starter's update; with WantIOProxy
    # condor_starter takes get_job_attr_delayed for get_job_attr of `_delayed`.
    assert values["ChirpDelayed"] == "later" and values["NotChirpPrefixed"] is None
    assert "== get_job_attr_delayed ChirpDelayed\nUNDEFINED\n" in out


def test_chirp_without_want_io_proxy_as_on_condor_startd(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    ours, condor = on_both(running_pool, lambda pool: chirping_job(pool, ""))
    out, values, generic = ours
    assert ours == condor
    assert values["ChirpTestString"] is None and generic == []
    assert "Error: 22 (Invalid argument)" in out  # Chirp's -8: not served for this job
    # Delayed updates are served to every job.
    assert values["ChirpDelayed"] == "later" and values["NotChirpPrefixed"] is None
    assert "== get_job_attr_delayed ChirpDelayed\n\"later\"\nrc=0" in out
    assert "== get_job_attr_delayed ChirpDelayedNumber\n6 * 7\nrc=0" in out
    assert values["ExitCode"] == 3


RESTART_SCRIPT = "#!/bin/sh\n" + CHIRP_SETUP + """\
ready="$1"; release="$2"
step set_job_attr ChirpBefore 1
cat "$_CONDOR_CHIRP_CONFIG" > "$ready.tmp"; mv "$ready.tmp" "$ready"
while [ ! -e "$release" ]; do sleep 0.2; done
step set_job_attr ChirpAfter 2
step get_job_attr ChirpBefore
step ulog "after the restart"
"""


def listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError:
        return False
    return True


def test_chirp_is_served_again_after_execds_restart_in_place_and_gone_after_the_job(
        pool: harness.Pool) -> None:  # fmt: skip
    """SIGUSR2 while the job waits: the listening socket goes to the new image (nobody
    can bind its port in between) with the cookie of the job's .chirp.config, so the
    job's next condor_chirp calls work; once the job has ended nothing listens there."""
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"  # the job's .chirp.config is copied here:
    ready, release = Path(f"/tmp/execd-chirp-ready-{stamp}"), Path(f"/tmp/execd-chirp-go-{stamp}")
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            job = submit_files(pool, PLAIN_SUBMIT.format(
                args=f"{ready} {release}", extra="+WantIOProxy = true"),
                {"job.sh": RESTART_SCRIPT.format(root=pool.root)})  # fmt: skip
            harness.wait_for(f"the job's {ready}", ready.exists, WAIT_S)
            host, port, cookie = ready.read_text().split()
            assert host == "127.0.0.1" and listening(host, int(port))
            node.send(signal.SIGUSR2)
            node.wait_for("execd_stopped", how="restart")
            with socket.socket() as squatter, pytest.raises(OSError):  # handed over: the
                squatter.bind((host, int(port)))  # port is never free for anyone else
            node.wait_for("shadow_conversation_resumed")
            assert listening(host, int(port))
            release.touch()
            job.wait_for_event("005", WAIT_S)
            node.wait_for("shadow_job_exited")
            assert not listening(host, int(port))
        finally:
            node.stop(signal.SIGQUIT)
            for path in (ready, release):
                path.unlink(missing_ok=True)
    out = job.output("out.txt")
    assert out.count("rc=0") == 4, out
    assert "== get_job_attr ChirpBefore\n1\nrc=0" in out
    record = harness.wait_for("the job's history record", lambda: pool.history(job.cluster),
                              WAIT_S)[0]  # fmt: skip
    assert (record.get("ChirpBefore"), record.get("ChirpAfter")) == (1, 2)
    assert generic_events(job.user_log()) == ["after the restart"]
    assert cookie not in node.log.read_text()  # the job's secret is never logged
