"""Job hooks during real jobs: PREPARE_JOB, UPDATE_JOB_INFO, JOB_EXIT through `execd job`.

Real hook scripts run by a real daemon as the job's user (nobody); each appends a line
to a file, so the order and the arguments are what the test reads back.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.component.daemon_harness import REPO, RunningDaemon, public_dir, write_script

NOBODY = 65534


@pytest.fixture
def hookdir() -> Iterator[Path]:
    with public_dir("execd-test-hooks-") as path:
        yield path


def hook(hookdir: Path, name: str, body: str) -> Path:
    return write_script(hookdir, name, body)


def record(hookdir: Path) -> Path:
    trail = hookdir / "trail"
    trail.touch()
    trail.chmod(0o666)  # the hooks run as nobody
    return trail


def node(hookdir: Path, extra: str) -> RunningDaemon:
    root = hookdir / "node"
    root.mkdir()
    return RunningDaemon(
        root, "NUM_CPUS = 2\nMEMORY = 2048\nMAXJOBRETIREMENTTIME = 0\nMachineMaxVacateTime = 5\n"
        + extra,
    ).start()


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_prepare_update_and_exit_hooks_run_in_order_as_the_job_user(hookdir: Path) -> None:
    trail = record(hookdir)
    # PREPARE_JOB sees the ad on stdin and rewrites the job's arguments
    prepare = hook(hookdir, "prepare", f"""
grep -q '^HookKeyword = "TEST"' && echo "prepare uid=$(id -u)" >> {trail}
echo 'Args = "edited-by-hook"'
echo 'PreparedBy = "hook"'
""")
    update = hook(hookdir, "update", f"""
ad=$(cat)
state=$(echo "$ad" | sed -n 's/^JobState = "\\(.*\\)"/\\1/p')
pid=$(echo "$ad" | sed -n 's/^JobPid = //p')
echo "update $state pid=$pid" >> {trail}
""")
    job_exit = hook(hookdir, "exit", f"""
code=$(sed -n 's/^ExitCode = //p')
echo "exit $1 code=$code uid=$(id -u)" >> {trail}
""")
    daemon = node(hookdir, f"TEST_HOOK_PREPARE_JOB = {prepare}\n"
                  f"TEST_HOOK_UPDATE_JOB_INFO = {update}\nTEST_HOOK_JOB_EXIT = {job_exit}\n"
                  "STARTER_INITIAL_UPDATE_INTERVAL = 0\nSTARTER_UPDATE_INTERVAL = 1\n"
                  "CGROUP_POLLING_INTERVAL = 1\n")
    try:
        # the job waits until an UPDATE_JOB_INFO run saw its pid (from the starter's
        # measurements), then prints its (edited) argument
        wait = f"until grep -q \"^update Running pid=$$\\$\" {trail}; do sleep 0.1; done"
        program = hook(hookdir, "program", f'{wait}; echo "$1"; exit 3\n')
        done = daemon.execd("job", "--attr", "HookKeyword=TEST", "--", str(program), "original",
                            timeout=90)
        assert done.returncode == 3, done.stderr
        assert done.stdout.strip() == "edited-by-hook"
        got = lines(trail)
        assert got[0] == f"prepare uid={NOBODY}"
        assert got[1].startswith("update Running pid=")
        assert got[-1] == f"exit exit code=3 uid={NOBODY}"
        assert all(line.startswith("update") for line in got[1:-1])
        prepared = daemon.wait_for("job_prepared")
        assert prepared["action"] == "run" and prepared["edited"] == ["Args", "PreparedBy"]
    finally:
        daemon.stop(signal.SIGQUIT)


def test_prepare_status_code_below_300_holds_the_job_without_running_it(hookdir: Path) -> None:
    marker = hookdir / "ran"
    prepare = hook(hookdir, "prepare", """cat >/dev/null
echo 'HookStatusCode = 42'
echo 'HookStatusMessage = "scratch disk missing"'
""")
    daemon = node(hookdir, f"STARTER_DEFAULT_JOB_HOOK_KEYWORD = SITE\n"
                  f"SITE_HOOK_PREPARE_JOB = {prepare}\n")
    try:
        done = daemon.execd("job", "--", "touch", str(marker), timeout=90)
        assert done.returncode == 125, done.stderr  # held
        assert "scratch disk missing" in done.stderr
        assert "code 19, subcode 42" in done.stderr
        assert not marker.exists()
        assert daemon.wait_for("job_finished")["reason"] == "held"
        # the slot is sane: the d-slot went back and the next job runs
        daemon.wait_for("dynamic_slot_deleted")
        status = daemon.execd("status", "-af", "Name", "State", "Cpus")
        assert status.stdout.split()[1:] == ["Unclaimed", "2"]
    finally:
        daemon.stop(signal.SIGQUIT)


def test_prepare_status_code_300_or_more_returns_the_job_to_idle(hookdir: Path) -> None:
    prepare = hook(hookdir, "prepare", "echo 'HookStatusCode = 301'\n")
    daemon = node(hookdir, f"STARTER_DEFAULT_JOB_HOOK_KEYWORD = SITE\n"
                  f"SITE_HOOK_PREPARE_JOB = {prepare}\n")
    try:
        done = daemon.execd("job", "--", "true", timeout=90)
        assert done.returncode == 124, done.stderr
        assert "returned_to_idle" in done.stderr
    finally:
        daemon.stop(signal.SIGQUIT)


def test_job_exit_hook_says_evict_when_the_job_is_vacated(hookdir: Path) -> None:
    trail = record(hookdir)
    job_exit = hook(hookdir, "exit", f'cat >/dev/null; echo "exit $1" >> {trail}\n')
    daemon = node(hookdir, f"STARTD_JOB_HOOK_KEYWORD = X\nSTARTER_DEFAULT_JOB_HOOK_KEYWORD = X\n"
                  f"X_HOOK_JOB_EXIT = {job_exit}\n")
    try:
        waiting = subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(daemon.config), "job", "--",
             "sh", "-c", "echo started; while :; do sleep 0.1; done"],
            env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO,
        )
        assert waiting.stdout is not None
        assert waiting.stdout.readline().strip() == "started"
        assert daemon.execd("vacate", "slot1_1").returncode == 0
        waiting.communicate(timeout=60)
        assert lines(trail) == ["exit evict"]
    finally:
        daemon.stop(signal.SIGQUIT)


def test_failing_and_hanging_hooks_leave_the_daemon_and_slot_sane(hookdir: Path) -> None:
    # PREPARE_JOB hangs past its timeout: it is killed (the job held), and meanwhile the
    # daemon keeps answering; JOB_EXIT is missing; UPDATE_JOB_INFO fails noisily.
    hang = hook(hookdir, "hang", "echo 'waiting for nothing' >&2; sleep 600\n")
    noisy = hook(hookdir, "noisy", "echo 'update hook broke' >&2; exit 5\n")
    daemon = node(hookdir, f"STARTER_DEFAULT_JOB_HOOK_KEYWORD = H\nH_HOOK_PREPARE_JOB = {hang}\n"
                  "H_HOOK_PREPARE_JOB_TIMEOUT = 2\n"
                  f"G_HOOK_UPDATE_JOB_INFO = {noisy}\nG_HOOK_JOB_EXIT = {hookdir}/missing\n"
                  "STARTER_INITIAL_UPDATE_INTERVAL = 0\nSTARTER_UPDATE_INTERVAL = 1\n")
    try:
        held = subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(daemon.config), "job", "--", "true"],
            env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO,
        )
        daemon.wait_for("claim_granted")
        assert daemon.execd("status", "-af", "Name").returncode == 0  # the loop is free
        _out, err = held.communicate(timeout=60)
        assert held.returncode == 125, err
        failed = daemon.wait_for("job_hook_failed", hook="PREPARE_JOB")
        assert failed["why"] == "timed out"
        assert "waiting for nothing" in failed["stderr"]

        # keyword G by the job's HookKeyword: a failing UPDATE_JOB_INFO and a JOB_EXIT
        # that does not exist change nothing about the job's outcome
        trail = record(hookdir)
        script = f"until [ -s {trail}.seen ]; do sleep 0.1; done; exit 0"
        waiting = subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(daemon.config), "job",
             "--attr", "HookKeyword=G", "--", "sh", "-c", script],
            env=daemon.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=REPO,
        )
        ran = daemon.wait_for("job_hook_ran", hook="UPDATE_JOB_INFO", timeout=60)
        assert ran["exit_code"] == 5 and "update hook broke" in ran["stderr"]
        Path(f"{trail}.seen").write_text("go\n")
        _out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, err
        missing = daemon.wait_for("job_hook_failed", hook="JOB_EXIT")
        assert "FileNotFoundError" in missing["why"]
        daemon.wait_for("dynamic_slot_deleted")
        status = daemon.execd("status", "-af", "State", "Cpus")
        assert status.stdout.split() == ["Unclaimed", "2"]
    finally:
        daemon.stop(signal.SIGQUIT)
