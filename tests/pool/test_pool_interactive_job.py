"""An interactive job (`condor_submit -interactive`) on `execd run` and on the pool's own
condor_startd: the same session, the same user log, the same termination.

condor_submit -interactive submits HTCondor's placeholder (its interactive.sub: /bin/sh
sleeping 180 s, then while the first session's directory exists) with
`MY.InteractiveJob = True`, then runs `condor_ssh_to_job -auto-retry` into it on the
user's terminal. Here the same job is submitted (with a user log and a small memory
request; a marker of the test's own in a comment of the placeholder's script, to find
its process) and the chroot's condor_ssh_to_job runs a command in it without a
terminal, as tests/pool/test_pool_ssh_to_job.py does (its `ssh_config` fixture serves
execd the chroot's ssh programs). The session's condor_ssh_to_job_shell_setup kills the
placeholder as the session opens; the session goes on after that (the test waits for
the placeholder's end, then for the session's own word a few seconds later, before it
looks at the job's events and lets the session's command finish), and the job ends
when the session ends, as the session's sshd ended, though the session left a process
running (`setsid ... &`): the job ends with its last sshd, and what was left goes with it.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import on_both, submit_files
from test_pool_ssh_to_job import ssh_config  # noqa: F401 - the module's fixture
from user_log_view import events

# HTCondor 25.14.1's interactive.sub (the chroot's /usr/libexec/condor), less its 512 MB
# memory request, with what condor_submit -interactive adds (MY.InteractiveJob) and what
# the test reads (user log, stdout, stderr).
SUBMIT = """\
universe = vanilla
executable = /bin/sh
arguments = "-c 'sleep 180 && while test -d ${{_CONDOR_SCRATCH_DIR}}/.condor_ssh_to_job_1; \
do /bin/sleep 3; done # {marker}'"
environment = "TMOUT=7200"
transfer_executable = false
notification = never
priority = 1000
MY.InteractiveJob = True
log = job.log
output = out.txt
error = err.txt
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
request_memory = 64
queue
"""
# How the session's sshd ended, as the termination event says it: 0, or 255 where sshd
# took the client's disconnection as an error (a race inside sshd's teardown: execd's
# runs of this test have seen both).
# The placeholder's marker; the test's files and markers are named after the same stamp.
PLACEHOLDER = "execd-interactive-{stamp}"
SSHD_EXIT = re.compile(r"\(return value (0|255)\)")
# The session: says it is open; told the placeholder has gone, says it still runs 3 s
# later (time for a wrong 005 to show); waits for the test, shows what it sees, and
# leaves a process running as it logs out.
COMMAND = ('echo open; while [ ! -e {gone} ]; do sleep 0.1; done; sleep 3; echo still open; '
           'while [ ! -e {release} ]; do sleep 0.1; done; '
           'echo "pids=[$_CONDOR_JOB_PIDS]"; echo "tmout=$TMOUT"; pwd; '
           'grep "^InteractiveJob" .job.ad; ls -a | grep -c condor_ssh_to_job_; '
           'setsid /bin/sh -c "sleep 600; : {left}" </dev/null >/dev/null 2>&1 & exit 7')


def scripts(marker: str) -> list[int]:
    """The pids of the `/bin/sh -c` whose script names `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[:2] == [b"/bin/sh", b"-c"] and marker.encode() in b"".join(argv[2:]):
                found.append(int(entry.name))
    return found


def running(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in (Path(f"/proc/{pid}") / "cmdline").read_bytes()
    except OSError:
        return False


@contextlib.contextmanager
def interactive_job(pool: harness.Pool) -> Iterator[tuple[harness.SubmittedJob, int, str]]:
    """The placeholder submitted and running: (the job, its pid, a stamp for the
    test's own files and markers)."""
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    job = submit_files(pool, SUBMIT.format(marker=PLACEHOLDER.format(stamp=stamp)), {})
    job.wait_for_event("001", WAIT_S)
    yield job, placeholder(stamp), stamp


def placeholder(stamp: str) -> int:
    """The pid of the job's /bin/sh once it runs (its script names the stamp)."""
    marker = PLACEHOLDER.format(stamp=stamp)
    pid: int = harness.wait_for("the placeholder", lambda: (found := scripts(marker)) and found[0],
                                WAIT_S, 0.05)  # fmt: skip
    return pid


@contextlib.contextmanager
def session_in(pool: harness.Pool, job: harness.SubmittedJob,
               command: str) -> Iterator[subprocess.Popen[str]]:  # fmt: skip
    """condor_ssh_to_job -auto-retry running `command` in the job without a terminal
    (stdin, stdout and stderr pipes); killed, with its ssh, if it still runs after."""
    script = shlex.join(["condor_ssh_to_job", "-auto-retry", f"{job.cluster}.0", command])
    user = harness.SUBMITTER
    session = subprocess.Popen(
        ["chroot", f"--userspec={user}:{user}", str(pool.root), "env", "-i",
         f"PATH={harness.CHROOT_PATH}", f"HOME=/home/{user}", f"USER={user}",
         "sh", "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        yield session
    finally:
        if session.poll() is None:
            os.killpg(session.pid, signal.SIGKILL)
        session.communicate()


def ended(session: subprocess.Popen[str]) -> tuple[int, str, str]:
    """The session's exit code, the rest of its stdout and its stderr (less
    -auto-retry's note; the execute host's name, in ssh's host alias
    `condor-job.<host>`, as <host>) once it has ended."""
    out, err = session.communicate(timeout=WAIT_S)
    err = err.replace("Waiting for job to start...\n", "")
    return session.returncode, out, re.sub(r"\bcondor-job\.\S+", "condor-job.<host>", err)


def kill_left(left: str) -> None:
    """Kill what a session left running (its own session: setsid), wherever it is."""
    for stray in scripts(left):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(stray, signal.SIGKILL)


def interactive_session(pool: harness.Pool) -> dict[str, Any]:
    """The placeholder submitted, a session opened in it; once the placeholder has
    gone, the session's command; then the job's end."""
    with interactive_job(pool) as (job, pid, stamp):
        release = Path(f"/tmp/execd-interactive-go-{stamp}")
        gone, left = Path(f"/tmp/execd-interactive-gone-{stamp}"), f"execd-interactive-left-{stamp}"
        command = COMMAND.format(release=release, gone=gone, left=left)
        try:
            with session_in(pool, job, command) as session:
                assert session.stdout is not None
                opened = session.stdout.readline()
                harness.wait_for("the placeholder's end", lambda: not running(pid, stamp),
                                 WAIT_S, 0.05)  # fmt: skip
                gone.touch()
                still = session.stdout.readline()
                while_open = job.events()
                release.touch()
                code, out, err = ended(session)
            log = job.wait_for_event("005", WAIT_S)
            left_running = bool(scripts(left))
        finally:
            release.unlink(missing_ok=True)
            gone.unlink(missing_ok=True)
            kill_left(left)
    sandbox = next((line for line in out.splitlines() if line.startswith("/")), "?")
    return {
        "opened": opened,
        "still": still,
        "left running": left_running,
        "session": (code, out.replace(sandbox, "<sandbox>"), err),
        "events while open": [code for code in while_open if code != "006"],
        "events": [code for code in job.events() if code != "006"],
        "ended": SSHD_EXIT.sub("(return value <sshd's>)",
                               next(body[0] for code, body in events(log) if code == "005")),
        "out": job.output("out.txt"),
        "err": job.output("err.txt"),
        "returned": sorted(p.name for p in job.host_dir.iterdir() if "ssh_to_job" in p.name),
    }


def test_an_interactive_job_ends_with_its_session_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # noqa: F811  # fmt: skip
    """The same interactive job on both: the session opens (its shell setup kills the
    placeholder), goes on after the placeholder's end with the job's environment and
    no _CONDOR_JOB_PIDS left, and its exit code comes back; the job terminates only
    once the session has ended, as its sshd ended (condor_starter reports an
    interactive job's last sshd's exit over the killed placeholder's), though the
    session left a process running, which goes with the job (on execd before: the job
    waited for it without end); nothing of the session is sent back."""
    ours, theirs = on_both(running_pool, interactive_session, ssh_config)
    assert not ours.pop("left running")  # killed with the slice before the 005
    theirs.pop("left running")  # (condor_startd's: not compared)
    assert ours == theirs
    assert ours["opened"] == "open\n"
    assert ours["still"] == "still open\n"
    assert ours["session"] == (7, "pids=[]\ntmout=7200\n<sandbox>\nInteractiveJob = true\n1\n", "")
    assert "005" not in ours["events while open"]
    # the session's sshd's end, not the placeholder's SIGTERM
    assert ours["ended"] == "(1) Normal termination (return value <sshd's>)"
    assert ours["returned"] == []
