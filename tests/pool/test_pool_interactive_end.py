"""How an interactive job (`condor_submit -interactive`) ends with its session still
open, on `execd run` and on the pool's own condor_startd: condor_rm, condor_vacate_job,
and a second session opened after the placeholder's end; on `execd run` alone, a
session open across execd's restart in place (`execd restart`).

The job and the sessions are test_pool_interactive_job.py's: HTCondor's placeholder
with `MY.InteractiveJob = True`, the chroot's condor_ssh_to_job run into it without a
terminal. The placeholder's end (the first session's shell setup kills it) is awaited
before anything else; the sessions are stepped through their stdin.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
from pool_node import wait_pool
from test_pool_daemon import WAIT_S
from test_pool_interactive_job import (
    SSHD_EXIT,
    ended,
    interactive_job,
    kill_left,
    placeholder,
    running,
    scripts,
    session_in,
)
from test_pool_jobs import on_both, pool_node, timeless
from test_pool_ssh_to_job import ssh_config  # noqa: F401 - the module's fixture
from user_log_view import events

# What a session leaves running names this (the job's stamp in it).
LEFT = "execd-interactive-left-{stamp}"
# A session that says it is open and waits in a process the test can find.
WAITING = 'echo open; /bin/sh -c "sleep 600; : {left}"; echo after'
# The first of two sessions: open; told the second has opened, says it still runs;
# told again, exits 5.
FIRST = "echo open; read step; echo still open; read step; exit 5"
# The second: how many pids its _CONDOR_JOB_PIDS named (its shell setup empties the
# variable after it has killed them: the session directory's env.sh has it); open;
# told the first has ended, says it still runs 3 s later (time for a wrong 005 to
# show); told again, exits 6.
SECOND = ('(. ./.condor_ssh_to_job_2/env.sh; set -- $_CONDOR_JOB_PIDS; echo "pids=$#"); '
          "echo open; read step; sleep 3; echo still open; read step; exit 6")


def step(session: subprocess.Popen[str]) -> str:
    """Tell a session to go on; the line it then says ("" once it has ended)."""
    assert session.stdin is not None and session.stdout is not None
    with contextlib.suppress(BrokenPipeError):
        session.stdin.write("\n")
        session.stdin.flush()
    return session.stdout.readline()


def endings(log: str) -> list[str]:
    """The eviction (004) and abort (009) events: their headlines without the time
    stamp, the 004's Reason line and the 009's own line."""
    shown = []
    for block in log.split("...\n"):
        head, _, body = block.strip("\n").partition("\n")
        if head[:3] in ("004", "009"):
            shown.append(re.sub(r"^(\d{3}) \(\S+\) \S+ \S+ ", r"\1 ", head))
            shown += [line.strip() for line in body.splitlines()
                      if head[:3] == "009" or line.strip().startswith("Reason:")]  # fmt: skip
    return shown


def idle_slots(pool: harness.Pool) -> list[tuple[str, str]]:
    """(State, Activity) of each slot once the job's dynamic slot has gone and none is
    Claimed or Preempting (not a snapshot taken on the way)."""
    found: list[tuple[str, str]] = wait_pool(pool, "the dynamic slot gone", lambda slots: len(
        slots) == 1 and all(ad["State"] not in ("Claimed", "Preempting")
                            for ad in slots.values()) and sorted(
        (ad["State"], ad["Activity"]) for ad in slots.values()))  # fmt: skip
    return found


@contextlib.contextmanager
def opened(pool: harness.Pool, command: str) -> Iterator[tuple[harness.SubmittedJob, str,
                                                                subprocess.Popen[str], str]]:
    """The placeholder submitted, a session running `command` opened in it (`{left}`
    in it: LEFT, to mark what it leaves running) and the placeholder's end awaited:
    (the job, its stamp, the session, the session's first line). What the session
    left is killed after."""
    with interactive_job(pool) as (job, pid, stamp):
        try:
            with session_in(pool, job, command.format(left=LEFT.format(stamp=stamp))) as session:
                assert session.stdout is not None
                first = session.stdout.readline()
                harness.wait_for("the placeholder's end", lambda: not running(pid, stamp),
                                 WAIT_S, 0.05)  # fmt: skip
                yield job, stamp, session, first
        finally:
            kill_left(LEFT.format(stamp=stamp))


def ended_while_open(pool: harness.Pool, tool: str) -> dict[str, Any]:
    """`tool` (condor_rm, condor_vacate_job) of the job while a session waits in it,
    after the placeholder's end; after a vacate, the rerun's placeholder awaited, the
    job removed."""
    with opened(pool, WAITING) as (job, stamp, session, first):
        left = LEFT.format(stamp=stamp)
        harness.wait_for("the session's process", lambda: scripts(left), WAIT_S, 0.05)
        pool.tool(tool, f"{job.cluster}.0", user=harness.SUBMITTER).check()
        seen: dict[str, Any] = {"opened": first, "session": ended(session)}
        if tool == "condor_vacate_job":
            job.wait_for_event("004", WAIT_S)
            seen["rerun"] = running(placeholder(stamp), stamp)
            harness.wait_for("the rerun's 001", lambda: job.events().count("001") == 2,
                             WAIT_S, 0.1)  # fmt: skip
            pool.tool("condor_rm", f"{job.cluster}.0", user=harness.SUBMITTER).check()
        log = job.wait_for_event("009", WAIT_S)
        seen["slots"] = idle_slots(pool)
        seen["left running"] = bool(scripts(left))
    return {**seen, "events": timeless(job.events()), "endings": endings(log)}


def removed_while_open(pool: harness.Pool) -> dict[str, Any]:
    return ended_while_open(pool, "condor_rm")


def vacated_while_open(pool: harness.Pool) -> dict[str, Any]:
    return ended_while_open(pool, "condor_vacate_job")


def two_sessions(pool: harness.Pool) -> dict[str, Any]:
    """A first session; after the placeholder's end a second; the first told to end,
    then the second; the job's end."""
    with interactive_job(pool) as (job, pid, stamp):
        with session_in(pool, job, FIRST) as first:
            assert first.stdout is not None
            first_opened = first.stdout.readline()
            harness.wait_for("the placeholder's end", lambda: not running(pid, stamp),
                             WAIT_S, 0.05)  # fmt: skip
            with session_in(pool, job, SECOND) as second:
                assert second.stdout is not None
                second_opened = second.stdout.readline() + second.stdout.readline()
                first_still = step(first)
                step(first)
                first_end = ended(first)
                second_still = step(second)
                while_second = job.events()
                step(second)
                second_end = ended(second)
        log = job.wait_for_event("005", WAIT_S)
    return {
        "first": (first_opened, first_still, first_end),
        "second": (second_opened, second_still, second_end),
        "events while the second is open": timeless(while_second),
        "events": timeless(job.events()),
        "ended": SSHD_EXIT.sub("(return value <sshd's>)",
                               next(body[0] for code, body in events(log) if code == "005")),
    }


# A session open across execd's restart in place: open; told the restart is done,
# shows the job's ad; told again, leaves a process running (setsid) and exits 8.
ACROSS = ('echo open; read step; grep "^InteractiveJob" .job.ad; read step; '
          'setsid /bin/sh -c "sleep 600; : {left}" </dev/null >/dev/null 2>&1 & exit 8')


def children(pid: int) -> set[int]:
    """The pids whose parent is `pid` (a zombie not reaped yet included)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found.update(int(child) for child in (task / "children").read_text().split())
    return found


def open_across_a_restart(running_pool: harness.RunningPool, extra: str) -> dict[str, Any]:
    """`execd run`; the placeholder's end awaited, `execd restart` (in place) with a
    session open; once the new image has resumed the job's conversation, the session
    runs a command, then ends; the job's end."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, extra)
        assert node.proc is not None
        try:
            with opened(pool, ACROSS) as (job, stamp, session, first):
                before = children(node.proc.pid)  # the session's sshd, the zygote
                restarted = node.execd("restart")
                assert restarted.returncode == 0, restarted.stderr
                node.wait_for("execd_stopped", how="restart")
                node.wait_for("shadow_conversation_resumed")
                after = step(session)
                while_open = job.events()
                step(session)
                session_end = ended(session)
                log = job.wait_for_event("005", WAIT_S)
                left_running = bool(scripts(LEFT.format(stamp=stamp)))
                kept = before & children(node.proc.pid)
        finally:
            node.stop(signal.SIGQUIT)
    return {
        "opened": first,
        "after the restart": after,
        "session": session_end,
        "events while open": timeless(while_open),
        "events": timeless(job.events()),
        "ended": SSHD_EXIT.sub("(return value <sshd's>)",
                               next(body[0] for code, body in events(log) if code == "005")),
        "left running": left_running,
        "children kept": sorted(kept),
    }


# What condor_ssh_to_job says of a session whose sshd was killed.
CLOSED = (255, "", "Connection to condor-job.<host> closed by remote host.\n")


def test_condor_rm_with_a_session_open_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # noqa: F811  # fmt: skip
    """condor_rm of the job after the placeholder's end, a session open: on both the
    session is closed (condor_ssh_to_job exits 255, "closed by remote host"), what ran
    in it is gone, the job is evicted (004, "via condor_rm") and aborted (009), and
    the dynamic slot goes (the partitionable one, Unclaimed/Idle, is left)."""
    ours, theirs = on_both(running_pool, removed_while_open, ssh_config)
    assert ours == theirs
    assert ours["opened"] == "open\n"
    assert ours["session"] == CLOSED
    assert not ours["left running"]
    assert ours["events"] == ["000", "040", "040", "001", "004", "009"]
    assert ours["endings"] == ["004 Job was evicted. Code 1023 Subcode 0",
                               "Reason: via condor_rm (by user execdtest)",
                               "009 Job was aborted.", "via condor_rm (by user execdtest)"]
    assert ours["slots"] == [("Unclaimed", "Idle")]


def test_condor_vacate_job_with_a_session_open_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # noqa: F811  # fmt: skip
    """condor_vacate_job of the job after the placeholder's end, a session open: on
    both the session is closed as by condor_rm, the job is evicted (004, "Job
    vacated by schedd"), requeued and run again (a new placeholder); removed then,
    it is evicted and aborted (004, 009), the dynamic slot gone."""
    ours, theirs = on_both(running_pool, vacated_while_open, ssh_config)
    assert ours == theirs
    assert ours["session"] == CLOSED
    assert ours["rerun"]
    assert not ours["left running"]
    assert ours["events"] == ["000", "040", "040", "001", "004",
                              "040", "040", "001", "004", "009"]  # fmt: skip
    assert ours["endings"] == ["004 Job was evicted. Code 1022 Subcode 0",
                               "Reason: Job vacated by schedd",
                               "004 Job was evicted. Code 1023 Subcode 0",
                               "Reason: via condor_rm (by user execdtest)",
                               "009 Job was aborted.", "via condor_rm (by user execdtest)"]
    assert ours["slots"] == [("Unclaimed", "Idle")]


def test_a_second_session_after_the_placeholders_end_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # noqa: F811  # fmt: skip
    """A second session opened after the placeholder's end while the first is open.
    On both it works and the job ends only once no session is left, with the last
    sshd's exit. They differ in the second's _CONDOR_JOB_PIDS (docs/pool.md,
    Differences): condor_starter 25.14.1 names the first session's sshd, which the
    second's shell setup kills as it killed the placeholder, so the first session is
    closed as the second opens; execd names none, and the first goes on."""
    ours, theirs = on_both(running_pool, two_sessions, ssh_config)
    assert theirs["first"] == ("open\n", "", CLOSED)
    assert ours["first"] == ("open\n", "still open\n", (5, "", ""))
    assert theirs["second"] == ("pids=1\nopen\n", "still open\n", (6, "", ""))
    assert ours["second"] == ("pids=0\nopen\n", "still open\n", (6, "", ""))
    del ours["first"], ours["second"], theirs["first"], theirs["second"]
    assert ours == theirs
    assert "005" not in ours["events while the second is open"]
    assert ours["events"][-1] == "005"
    assert ours["ended"] == "(1) Normal termination (return value <sshd's>)"


def test_a_session_open_across_execds_restart_in_place_ends_the_job_with_its_sshd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # noqa: F811  # fmt: skip
    """execd only: `execd restart` (in place) while a session is open in the job,
    after the placeholder's end. The session goes on and runs a command after the
    restart; the job ends only when the session ends, with the same events as without
    a restart (no disconnection, one start) and with the session's sshd's exit as
    condor_starter reports an interactive job's (not the placeholder's SIGTERM: the
    new image waits for and reaps the sshd the earlier one started); what the session
    left goes with the job, and none of the daemon's children from before the restart
    (the sshd, the starter zygote) is left, not even a zombie."""
    seen = open_across_a_restart(running_pool, ssh_config)
    assert seen["opened"] == "open\n"
    assert seen["after the restart"] == "InteractiveJob = true\n"
    assert seen["session"] == (8, "", "")
    assert "005" not in seen["events while open"]
    assert seen["events"] == ["000", "040", "040", "001", "040", "040", "005"]
    assert seen["ended"] == "(1) Normal termination (return value <sshd's>)"
    assert not seen["left running"]
    assert seen["children kept"] == []
