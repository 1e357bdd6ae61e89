"""Fetch-work hooks through a real daemon, modelled on HTCondor's fetch_work tests.

A FETCH_WORK hook hands out one /bin/cat job, then nothing; the job runs on a static
slot and on a d-slot carved from a partitionable one, its output matches its input, and
FETCH_WORK, REPLY_FETCH, UPDATE_JOB_INFO, JOB_EXIT, FETCH_WORK again and EVICT_CLAIM
are invoked in that order (each hook appends a line to a trail file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import REPO, RunningDaemon, public_dir, write_script

KEYWORD = "FETCHTEST"


@pytest.fixture
def hookdir() -> Iterator[Path]:
    with public_dir("execd-test-fetch-") as path:
        yield path


def hook(hookdir: Path, name: str, body: str) -> Path:
    return write_script(hookdir, name, body)


def setup_hooks(hookdir: Path, job_ad: str) -> tuple[Path, str]:
    trail = hookdir / "trail"
    trail.touch()
    trail.chmod(0o666)  # UPDATE_JOB_INFO and JOB_EXIT run as the job's user
    (hookdir / "job.ad").write_text(job_ad)
    fetch = hook(hookdir, "fetch", f"""
cat > {hookdir}/slot_ad.$$
if [ ! -e {hookdir}/fetched ]; then
  touch {hookdir}/fetched
  echo "fetch job" >> {trail}
  cat {hookdir}/job.ad
else
  echo "fetch none" >> {trail}
fi
""")
    reply = hook(hookdir, "reply", f"""
ads=$(cat)
case "$ads" in
  *'HookKeyword = "{KEYWORD}"'*-----*'Name = "slot'*) shape=ok ;;
  *) shape=bad ;;
esac
echo "reply $1 $shape" >> {trail}
""")
    evict = hook(hookdir, "evict", f'cat >/dev/null; echo "evict" >> {trail}\n')
    update = hook(hookdir, "update", f'cat >/dev/null; echo "update" >> {trail}\n')
    job_exit = hook(hookdir, "exit", f'cat >/dev/null; echo "exit $1" >> {trail}\n')
    config = (
        f"STARTD_JOB_HOOK_KEYWORD = {KEYWORD}\n"
        f"{KEYWORD}_HOOK_FETCH_WORK = {fetch}\n{KEYWORD}_HOOK_REPLY_FETCH = {reply}\n"
        f"{KEYWORD}_HOOK_EVICT_CLAIM = {evict}\n{KEYWORD}_HOOK_UPDATE_JOB_INFO = {update}\n"
        f"{KEYWORD}_HOOK_JOB_EXIT = {job_exit}\n"
        'FetchWorkDelay = ifThenElse(State == "Claimed" && Activity == "Idle", 0, 300)\n'
        "STARTER_INITIAL_UPDATE_INTERVAL = 0\nSTARTER_UPDATE_INTERVAL = 1\n"
        "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n"
    )
    return trail, config


def cat_job(iwd: Path, extra: str = "") -> str:
    return (f'Cmd = "/bin/cat"\nOwner = "nobody"\nIwd = "{iwd}"\nIn = "input"\n'
            f'Out = "output"\nErr = "error"\nJobUniverse = 5\n{extra}')


def feed_when_updated(fifo: Path, trail: Path, text: str) -> threading.Thread:
    """Write TEXT into the job's stdin FIFO once cat opens it, close it after an
    UPDATE_JOB_INFO run and the REPLY_FETCH (never awaited by the daemon): cat then
    ends, with both hooks surely seen during the job."""
    done = threading.Event()

    def feed() -> None:
        with fifo.open("w") as pipe:  # blocks until cat opens its end
            pipe.write(text)
            pipe.flush()
            while not ("update" in (seen := trail.read_text()) and "reply" in seen) \
                    and not done.wait(0.05):
                pass

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    return thread


def run_fetched_cat(hookdir: Path, slot_config: str, job_extra: str) -> tuple[RunningDaemon, Path]:
    iwd = hookdir / "iwd"
    iwd.mkdir()
    iwd.chmod(0o777)
    fifo = iwd / "input"
    os.mkfifo(fifo, 0o666)
    trail, config = setup_hooks(hookdir, cat_job(iwd, job_extra))
    root = hookdir / "node"
    root.mkdir()
    feeder = feed_when_updated(fifo, trail, "hello from a fetched job\n")
    daemon = RunningDaemon(root, config + slot_config).start()
    daemon.wait_for("fetch_hook_ran", hook="EVICT_CLAIM", timeout=90)
    feeder.join(timeout=30)
    assert (iwd / "output").read_text() == "hello from a fetched job\n"
    return daemon, trail


def first(daemon: RunningDaemon, event: str) -> dict[str, object]:
    return next(e for e in daemon.events() if e["event"] == event)


def replies_ran(daemon: RunningDaemon, count: int, timeout: float = 30) -> None:
    """Wait until COUNT REPLY_FETCH runs are logged, wherever they fall in the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for e in daemon.events() if e["event"] == "fetch_hook_ran"
               and e.get("hook") == "REPLY_FETCH") >= count:
            return
        time.sleep(0.05)  # polling the log file: there is no notification to await
    raise AssertionError(f"fewer than {count} REPLY_FETCH runs within {timeout}s")


def check_trail(trail: Path) -> None:
    got = trail.read_text().splitlines()
    assert got[0] == "fetch job"
    during = got[1:-3]  # REPLY_FETCH is not awaited: it may come before or after an update
    assert during.count("reply accept ok") == 1
    assert "update" in during and set(during) == {"reply accept ok", "update"}
    assert got[-3:] == ["exit exit", "fetch none", "evict"]


def test_fetched_cat_job_on_a_static_slot(hookdir: Path) -> None:
    daemon, trail = run_fetched_cat(hookdir, "SLOT_TYPE_1_PARTITIONABLE = False\n", "")
    try:
        check_trail(trail)
        started = first(daemon, "fetched_job_started")
        assert started["slot"] == "slot1" and started["keyword"] == KEYWORD
        # the fetch hook had the slot ad on stdin
        slot_ads = [p.read_text() for p in hookdir.glob("slot_ad.*")]
        assert slot_ads and all('Name = "slot1@' in text for text in slot_ads)
        # the claim was released: the slot went back to Unclaimed
        status = daemon.execd("status", "-af", "Name", "State")
        assert status.stdout.split()[1:] == ["Unclaimed"]
        # its ad says when the hook last ran, as condor_startd's: wall seconds, and the
        # FetchWorkDelay last evaluated (0 for the idle claim, then 300 unclaimed)
        times = daemon.execd("status", "-af", "LastFetchWorkSpawned", "LastFetchWorkCompleted",
                             "NextFetchWorkDelay").stdout.split()  # fmt: skip
        spawned, completed, delay = (int(value) for value in times)
        assert time.time() - 120 < spawned <= completed <= time.time() and delay in (0, 300)
    finally:
        daemon.stop(signal.SIGQUIT)


def test_fetched_cat_job_on_a_partitionable_slot(hookdir: Path) -> None:
    requests = "RequestCpus = 1\nRequestMemory = 64\nRequestDisk = 1024\n"
    daemon, trail = run_fetched_cat(hookdir, "", requests)
    try:
        check_trail(trail)
        started = first(daemon, "fetched_job_started")
        assert started["slot"] == "slot1_1"  # a d-slot carved with the fetched request
        assert first(daemon, "dynamic_slot_deleted")["slot"] == "slot1_1"
        status = daemon.execd("status", "-af", "Name", "Cpus")
        assert status.stdout.split()[1:] == ["2"]
        # a later d-slot that reuses the name is a new slot: it has never fetched, as
        # condor_startd's new d-slot (its ad does not carry slot1_1's old fetch times)
        go = hookdir / "go"
        with subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(daemon.config), "job", "--", "sh",
             "-c", f"echo started; while [ ! -e {go} ]; do sleep 0.1; done"],
            env=daemon.env(), stdout=subprocess.PIPE, text=True, cwd=REPO,
        ) as job:
            assert job.stdout is not None
            try:
                assert job.stdout.readline().strip() == "started"
                again = daemon.execd("status", "-af", "Name", "LastFetchWorkSpawned",
                                     "LastFetchWorkCompleted", "NextFetchWorkDelay").stdout
                assert again.splitlines()[1].startswith("slot1_1@"), again
                assert again.splitlines()[1].split()[1:] == ["0", "0", "-1"], again
            finally:
                go.touch()
    finally:
        daemon.stop(signal.SIGQUIT)


@pytest.mark.parametrize(("job", "problem"), [
    ('Owner = "nobody"\nRequestCpus = 1\nRequestMemory = 64\nRequestDisk = 1024\n',
     "Cmd is required"),
    ('Cmd = "/bin/true"\nRequestCpus = 1\nRequestMemory = 64\nRequestDisk = 1024\n',
     "Owner is required"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nRequestMemory = 64\nRequestDisk = 1024\n',
     "RequestCpus is required on a partitionable slot"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nRequestCpus = 1\nRequestMemory = 64\n'
     'RequestDisk = 1024\nJobUniverse = 10\n', "JobUniverse 10 (java) is not supported"),
    ('Cmd = "/bin/true"\nOwner = "nobody"\nRequestCpus = 1\nRequestMemory = 64\n'
     'RequestDisk = 1024\nArgs = 7\n', "Args must be a string"),
])
def test_an_invalid_fetched_job_is_rejected_and_the_slot_stays_free(
        hookdir: Path, job: str, problem: str) -> None:
    trail, config = setup_hooks(hookdir, job)
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, config).start()
    try:
        rejected = daemon.wait_for("fetched_job_rejected", timeout=60)
        assert problem in rejected["error"]
        daemon.wait_for("fetch_hook_ran", hook="REPLY_FETCH", args=["reject"])
        assert trail.read_text().splitlines() == ["fetch job", "reply reject bad"]
        status = daemon.execd("status", "-af", "Name", "State")
        assert status.stdout.split()[1:] == ["Unclaimed"]
    finally:
        daemon.stop(signal.SIGQUIT)


def counting_fetch(hookdir: Path, trail: Path, jobs: list[str]) -> Path:
    """A FETCH_WORK hook handing out JOBS one per call, then nothing."""
    for number, text in enumerate(jobs, start=1):
        (hookdir / f"job{number}.ad").write_text(text)
    return hook(hookdir, "fetch", f"""
cat >/dev/null
n=$(cat {hookdir}/count 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {hookdir}/count
if [ -e {hookdir}/job$n.ad ]; then echo "fetch job$n" >> {trail}; cat {hookdir}/job$n.ad
else echo "fetch none" >> {trail}; fi
""")


def test_the_claim_is_reused_for_the_next_fetched_job(hookdir: Path) -> None:
    trail, config = setup_hooks(hookdir, "")
    iwd = hookdir / "iwd"
    iwd.mkdir()
    iwd.chmod(0o777)
    writer = hook(hookdir, "writer", f'echo "$1" > {iwd}/out$1\n')
    jobs = [f'Cmd = "{writer}"\nArgs = "{n}"\nOwner = "nobody"\n' for n in (1, 2)]
    counting_fetch(hookdir, trail, jobs)
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, config + "SLOT_TYPE_1_PARTITIONABLE = False\n").start()
    try:
        daemon.wait_for("fetch_hook_ran", hook="EVICT_CLAIM", timeout=90)
        replies_ran(daemon, 2)
        got = trail.read_text().splitlines()
        # the awaited hooks in order; REPLY_FETCH is advisory, so only counted
        assert [line for line in got if line not in ("update", "reply accept ok")] == [
            "fetch job1", "exit exit", "fetch job2", "exit exit", "fetch none", "evict"]
        assert got.count("reply accept ok") == 2
        assert (iwd / "out1").read_text() == "1\n" and (iwd / "out2").read_text() == "2\n"
        events = daemon.events()
        assert [e["event"] for e in events].count("claim_granted") == 1  # one claim, reused
        started = [e["slot"] for e in events if e["event"] == "fetched_job_started"]
        assert started == ["slot1", "slot1"]
    finally:
        daemon.stop(signal.SIGQUIT)


def test_start_false_rejects_fetched_work(hookdir: Path) -> None:
    trail, config = setup_hooks(hookdir, cat_job(hookdir))
    root = hookdir / "node"
    root.mkdir()
    static = "SLOT_TYPE_1_PARTITIONABLE = False\n"
    daemon = RunningDaemon(root, config + "START = False\n" + static).start()
    try:
        refused = daemon.wait_for("fetched_job_refused", timeout=60)
        assert "START is not true" in refused["why"]
        daemon.wait_for("fetch_hook_ran", hook="REPLY_FETCH", args=["reject"])
        assert trail.read_text().splitlines() == ["fetch job", "reply reject ok"]
    finally:
        daemon.stop(signal.SIGQUIT)


def test_a_hanging_or_failing_fetch_hook_leaves_the_slot_usable(hookdir: Path) -> None:
    hang = hook(hookdir, "hang", "echo 'fetch is stuck' >&2; sleep 600\n")
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, f"STARTD_JOB_HOOK_KEYWORD = H\nH_HOOK_FETCH_WORK = {hang}\n"
                           "H_HOOK_FETCH_WORK_TIMEOUT = 2\nFetchWorkDelay = 1\n").start()
    try:
        # while the hook hangs, the daemon answers and runs ordinary jobs
        assert daemon.execd("status", "-af", "Name").returncode == 0
        failed = daemon.wait_for("fetch_hook_failed", timeout=60)
        assert failed["why"] == "timed out" and "fetch is stuck" in failed["stderr"]
        done = daemon.execd("job", "--", "sh", "-c", "exit 4", timeout=60)
        assert done.returncode == 4, done.stderr
        # a hook that prints garbage and fails: logged, nothing claimed
        (hookdir / "hang").write_text("#!/bin/sh\necho '%% not an ad'\nexit 1\n")
        rejected = daemon.wait_for("fetched_job_rejected", timeout=60)
        assert "Cmd is required" in rejected["error"]
        status = daemon.execd("status", "-af", "State", "Cpus", "TotalSlotCpus")
        state, cpus, total = status.stdout.split()
        assert (state, cpus) == ("Unclaimed", total)  # every CPU back in the p-slot
    finally:
        daemon.stop(signal.SIGQUIT)


def test_a_higher_ranked_fetched_job_preempts_the_running_one(hookdir: Path) -> None:
    trail, config = setup_hooks(hookdir, "")
    iwd = hookdir / "iwd"
    iwd.mkdir()
    iwd.chmod(0o777)
    looper = hook(hookdir, "looper", f"trap 'exit 0' TERM; touch {iwd}/running\n"
                  "while :; do sleep 0.1; done\n")
    writer = hook(hookdir, "writer", f'echo ranked > {iwd}/out\n')
    # FETCH_WORK hands out the low-ranked job, then nothing until it runs, then the
    # higher-ranked one, then nothing
    fetch = hook(hookdir, "fetch", f"""
cat >/dev/null
if [ ! -e {hookdir}/gave1 ]; then touch {hookdir}/gave1; echo 'Cmd = "{looper}"'
  echo 'Owner = "nobody"'; echo 'Prio = 1'
elif [ -e {iwd}/running ] && [ ! -e {hookdir}/gave2 ]; then touch {hookdir}/gave2
  echo 'Cmd = "{writer}"'; echo 'Owner = "nobody"'; echo 'Prio = 10'
fi
""")
    config += (f"{KEYWORD}_HOOK_FETCH_WORK = {fetch}\nRANK = TARGET.Prio\n"
               'FetchWorkDelay = ifThenElse(Activity == "Busy", 1, '
               'ifThenElse(State == "Claimed", 0, 300))\n'
               "SLOT_TYPE_1_PARTITIONABLE = False\n")
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, config).start()
    try:
        daemon.wait_for("preempting_claim", timeout=60)
        daemon.wait_for("job_hook_ran", hook="JOB_EXIT", args=["evict"], timeout=60)
        daemon.wait_for("job_hook_ran", hook="JOB_EXIT", args=["exit"], timeout=60)
        assert (iwd / "out").read_text() == "ranked\n"
        daemon.wait_for("fetched_claim_released", timeout=60)
        events = daemon.events()
        started = [e["slot"] for e in events if e["event"] == "fetched_job_started"]
        assert started == ["slot1", "slot1"]
        evicted = [e for e in events if e["event"] == "fetched_claim_evicted"]
        assert len(evicted) == 1  # the preempted claim's EVICT_CLAIM
        assert "exit evict" in trail.read_text().splitlines()
    finally:
        daemon.stop(signal.SIGQUIT)


def test_reconfig_turns_fetching_on(hookdir: Path) -> None:
    trail, config = setup_hooks(hookdir, "")
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, "").start()
    try:
        # no fetch hooks: never spawned, never completed, no delay evaluated (as
        # condor_startd publishes a slot without a hook keyword)
        times = daemon.execd("status", "-af", "LastFetchWorkSpawned", "LastFetchWorkCompleted",
                             "NextFetchWorkDelay").stdout.split()  # fmt: skip
        assert times == ["0", "0", "-1"]
        with daemon.config.open("a") as f:
            f.write(config)
        assert daemon.execd("reconfig").returncode == 0
        ran = daemon.wait_for("fetch_hook_ran", hook="FETCH_WORK", timeout=60)
        assert ran["slot"] == "slot1" and ran["keyword"] == KEYWORD
        assert trail.read_text().splitlines()[0] == "fetch job"
    finally:
        daemon.stop(signal.SIGQUIT)


def test_vacating_a_fetched_job_tells_job_exit_and_evict_claim(hookdir: Path) -> None:
    iwd = hookdir / "iwd"
    iwd.mkdir()
    iwd.chmod(0o777)
    looper = hook(hookdir, "looper", f"trap 'exit 0' TERM; touch {iwd}/running\n"
                  "while :; do sleep 0.1; done\n")
    trail, config = setup_hooks(hookdir, f'Cmd = "{looper}"\nOwner = "nobody"\n')
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, config + "SLOT_TYPE_1_PARTITIONABLE = False\n").start()
    try:
        daemon.wait_for("fetched_job_started", timeout=60)
        daemon.wait_for("fetch_hook_ran", hook="REPLY_FETCH", args=["accept"])
        assert daemon.execd("vacate", "slot1").returncode == 0
        daemon.wait_for("fetch_hook_ran", hook="EVICT_CLAIM", timeout=60)
        got = [line for line in trail.read_text().splitlines() if line != "update"]
        assert got[0] == "fetch job" and "reply accept ok" in got
        assert got[-2:] == ["exit evict", "evict"]
        assert first(daemon, "fetched_claim_evicted")["slot"] == "slot1"
    finally:
        daemon.stop(signal.SIGQUIT)


def test_shutdown_evicts_the_fetched_claim_and_tells_evict_claim(hookdir: Path) -> None:
    looper = hook(hookdir, "looper", "trap 'exit 0' TERM; while :; do sleep 0.1; done\n")
    trail, config = setup_hooks(hookdir, f'Cmd = "{looper}"\nOwner = "nobody"\n')
    root = hookdir / "node"
    root.mkdir()
    daemon = RunningDaemon(root, config + "SLOT_TYPE_1_PARTITIONABLE = False\n").start()
    daemon.wait_for("fetched_job_started", timeout=60)
    daemon.wait_for("fetch_hook_ran", hook="REPLY_FETCH", args=["accept"])  # not awaited
    assert daemon.stop(signal.SIGTERM) == 0  # graceful: the job is vacated, then exit
    got = [line for line in trail.read_text().splitlines() if line != "update"]
    assert got[-2:] == ["exit evict", "evict"]
