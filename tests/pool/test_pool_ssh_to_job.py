"""`condor_ssh_to_job` into a running job (START_SSHD), on `execd run` and on the pool's
own condor_startd: the same command, the same output and exit code.

The job writes a note and its own cgroup, says so by creating a marker, and waits for
a release file (both in /tmp, which the chroot shares with the host). Meanwhile the
chroot's condor_ssh_to_job (as the submitter, through the chroot's ssh client) runs a
command in it. condor_startd runs HTCondor's condor_ssh_to_job_sshd_setup, the
chroot's ssh-keygen and sshd where they are. execd runs outside the chroot: its
LIBEXEC holds copies of HTCondor's two shell scripts (the host's /bin/sh runs them),
and SSH_TO_JOB_SSHD / SSH_TO_JOB_SSH_KEYGEN name small wrappers that start the
chroot's programs with the chroot's own dynamic loader and libraries (no chroot(2):
they run as the job's user, as execd starts them); its sshd_config template is
HTCondor's with the paths of the chroot's sshd-session and sshd-auth (wrappers too),
which OpenSSH 10's sshd would otherwise look for on the host.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pool_harness as harness
import pytest
from test_pool_daemon import WAIT_S
from test_pool_jobs import PLAIN_SUBMIT, on_both, pool_node, submit_files

SCRIPT = """#!/bin/sh
ready="$1"; release="$2"
echo "a note from the job" > note.txt
id -un > whoami.txt
cat /proc/self/cgroup > job_cgroup.txt
touch "$ready"
while [ ! -e "$release" ]; do sleep 0.2; done
echo "released"
"""
EXTRA = 'environment = "GREETING=hello_from_the_job_env T=$$(CondorScratchDir)/x"'
# What the starter adds to the job's environment (condor_starter's GetJobEnv), which the
# session gets as the job does.
STARTER_ENV = ("T", "_CONDOR_JOB_IWD", "_CONDOR_SLOT", "_CONDOR_SCRATCH_DIR", "BATCH_SYSTEM",
               "TMP", "TEMP", "TMPDIR", "OMP_NUM_THREADS")  # fmt: skip
# What the ssh session runs in the job: where it is, as whom, the job's files and
# environment; then an exit code of its own.
COMMAND = ('pwd; id -un; cat note.txt; echo "scratch=$_CONDOR_SCRATCH_DIR"; '
           'echo "greeting=$GREETING"; test -n "$_CONDOR_JOB_PIDS" && echo pids; '
           'tr "\\0" " " < /proc/$_CONDOR_JOB_PIDS/cmdline | grep -c job.sh; '
           'kill -0 $_CONDOR_JOB_PIDS && echo the job is ours; '
           'ls -a | grep -c condor_ssh_to_job_; '
           f'env | grep -E "^({"|".join(STARTER_ENV)})=" | sort; exit 3')  # fmt: skip
CGROUP = "grep '^0::' /proc/self/cgroup"
WRAPPER = """#!/bin/sh
R={root}
exec "$R/lib64/ld-linux-x86-64.so.2" --library-path \
"$R/lib/x86_64-linux-gnu:$R/usr/lib/x86_64-linux-gnu:$R/usr/lib" \
"$R{path}" "$@"
"""
PROGRAMS = {"sshd": "/usr/sbin/sshd", "ssh-keygen": "/usr/bin/ssh-keygen",
            "sshd-session": "/usr/lib/openssh/sshd-session",
            "sshd-auth": "/usr/lib/openssh/sshd-auth"}  # fmt: skip
SCRIPTS = ("condor_ssh_to_job_sshd_setup", "condor_ssh_to_job_shell_setup")
# HTCondor's $(LIB)/libgetpwnam.so (CONDOR_SSH_TO_JOB_FAKE_PASSWD_ENTRY), which Debian
# does not package: the same behaviour, written here. execd runs this pool's jobs as
# nobody (the host has no execdtest), whom sshd would refuse (systemd's NSS marks it
# locked; its shell is nologin), as condor_starter's sshd would without the library.
FAKE_PASSWD = r"""
#include <pwd.h>
#include <stdlib.h>
#include <unistd.h>
static struct passwd entry;
static char empty[] = "";
struct passwd *getpwnam(const char *name) {
    char *home = getenv("HOME"), *shell = getenv("_CONDOR_SHELL");
    entry.pw_name = (char *)name;
    entry.pw_passwd = empty;
    entry.pw_uid = getuid();
    entry.pw_gid = getgid();
    entry.pw_gecos = empty;
    entry.pw_dir = home ? home : getenv("_CONDOR_SCRATCH_DIR");
    entry.pw_shell = shell ? shell : (char *)"/bin/bash";
    return &entry;
}
struct passwd *getpwuid(uid_t uid) { (void)uid; return getpwnam("condor-user"); }
"""
RETRY_NOTE = "Waiting for job to start...\n"
SSH_OFF = "ENABLE_SSH_TO_JOB = TARGET.User =!= \"nobody@nowhere\" && MY.Cpus < 0\n"
SSH_CONF_FILE = "/etc/condor/config.d/95-execd-ssh.conf"
NO_SSHD = "SSH_TO_JOB_SSHD = /nonexistent/sshd\n"


@pytest.fixture(scope="module")
def ssh_config() -> Iterator[str]:
    """execd's config for condor_ssh_to_job: the chroot's programs through wrappers."""
    root = harness.Pool().root
    if not (root / "usr" / "bin" / "ssh").exists():
        pytest.fail(f"{root} has no ssh client: run `python tests/tiers.py setup` as root")
    with tempfile.TemporaryDirectory(prefix="execd-ssh-") as tmp:
        Path(tmp).chmod(0o755)  # the job's user runs them
        for name, path in PROGRAMS.items():
            wrapper = Path(tmp, name)
            wrapper.write_text(WRAPPER.format(root=root, path=path))
            wrapper.chmod(0o755)
        libexec = Path(tmp, "libexec")
        libexec.mkdir(mode=0o755)
        for name in SCRIPTS:
            shutil.copy(root / "usr/libexec/condor" / name, libexec / name)
        template = Path(tmp, "sshd_config_template")
        template.write_text(
            (root / "usr/lib/condor/condor_ssh_to_job_sshd_config_template").read_text()
            + f"SshdSessionPath {tmp}/sshd-session\nSshdAuthPath {tmp}/sshd-auth\n")
        template.chmod(0o644)
        lib = Path(tmp, "lib")
        lib.mkdir(mode=0o755)
        Path(tmp, "getpwnam.c").write_text(FAKE_PASSWD)
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "libgetpwnam.so"),
                        str(Path(tmp, "getpwnam.c"))], check=True)  # fmt: skip
        yield (f"LIBEXEC = {libexec}\nLIB = {lib}\nSSH_TO_JOB_SSHD = {tmp}/sshd\n"
               f"SSH_TO_JOB_SSH_KEYGEN = {tmp}/ssh-keygen\n"
               f"SSH_TO_JOB_SSHD_CONFIG_TEMPLATE = {template}\n")


@contextlib.contextmanager
def waiting_job(pool: harness.Pool) -> Iterator[tuple[harness.SubmittedJob, Path]]:
    """SCRIPT's job once it waits: (the job, the file that releases it)."""
    stamp = f"{os.getpid()}-{time.monotonic_ns()}"
    ready, release = Path(f"/tmp/execd-ssh-ready-{stamp}"), Path(f"/tmp/execd-ssh-go-{stamp}")
    job = submit_files(pool, PLAIN_SUBMIT.format(args=f"{ready} {release}", extra=EXTRA),
                       {"job.sh": SCRIPT})  # fmt: skip
    try:
        harness.wait_for(f"the job's {ready}", ready.exists, WAIT_S)
        yield job, release
    finally:
        for path in (ready, release):
            path.unlink(missing_ok=True)


def ssh(pool: harness.Pool, job: str, command: str) -> tuple[int, str, str]:
    """condor_ssh_to_job -auto-retry (the schedd may not know the starter's address
    yet): its exit code, stdout and stderr, less the retry's own note."""
    done = pool.tool("condor_ssh_to_job", "-auto-retry", job, command,
                     user=harness.SUBMITTER, timeout_s=WAIT_S)  # fmt: skip
    return done.returncode, done.stdout, done.stderr.replace(RETRY_NOTE, "")


def open_session(pool: harness.Pool, job: str) -> subprocess.Popen[str]:
    """condor_ssh_to_job running a shell that waits, once it has said "open"."""
    script = shlex.join(["condor_ssh_to_job", "-auto-retry", job, "echo open; sleep 600"])
    user = harness.SUBMITTER
    session = subprocess.Popen(
        ["chroot", f"--userspec={user}:{user}", str(pool.root), "env", "-i",
         f"PATH={harness.CHROOT_PATH}", f"HOME=/home/{user}", f"USER={user}",
         "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, start_new_session=True)  # fmt: skip
    assert session.stdout is not None
    assert session.stdout.readline() == "open\n"  # blocks until the shell runs
    return session


def sessions_of_a_running_job(pool: harness.Pool) -> dict[str, Any]:
    """COMMAND and the shell's cgroup over condor_ssh_to_job; then the job's end."""
    with waiting_job(pool) as (job, release):
        job_id = f"{job.cluster}.0"
        seen: dict[str, Any] = {"command": ssh(pool, job_id, COMMAND),
                                "cgroup": ssh(pool, job_id, CGROUP)}  # fmt: skip
        release.touch()
        log = job.wait_for_event("005", WAIT_S)
        seen["ended"] = next(line.strip() for line in log.splitlines() if "termination" in line)
        seen["out"] = job.output("out.txt")
        seen["job cgroup"] = job.output("job_cgroup.txt")
        seen["job user"] = job.output("whoami.txt")
        seen["returned"] = sorted(p.name for p in job.host_dir.iterdir()
                                  if "ssh_to_job" in p.name)  # fmt: skip
        return seen


def generic(seen: dict[str, Any]) -> dict[str, Any]:
    """The sandbox's path (each execute point has its own) as <sandbox>, the job's
    user (execd's is nobody here) as <user>."""
    code, out, err = seen["command"]
    lines = out.splitlines()
    sandbox = lines[0] if lines else "?"
    user = seen["job user"].strip() or "?"
    lines = ["<user>" if line == user else line.replace(sandbox, "<sandbox>")
             for line in lines]  # fmt: skip
    return {**seen, "command": (code, "".join(f"{line}\n" for line in lines), err)}


def test_condor_ssh_to_job_runs_in_the_job_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # fmt: skip
    """The same command in the same job on both: same output and exit code, as the
    job's user, in its sandbox, with its environment; the session's directory is not
    sent back; the job goes on to its normal end. On execd the shell is in the job's
    slice (`<slot>.slice/sshd`, beside the job's `job` leaf), as condor_starter puts
    its sshd under the job's cgroup where it has one (this pool's has none)."""
    ours, theirs = on_both(running_pool, sessions_of_a_running_job, ssh_config)
    ours_generic, theirs_generic = generic(ours), generic(theirs)
    assert ours_generic["command"] == theirs_generic["command"]
    code, out, _err = ours_generic["command"]
    assert code == 3
    assert out.startswith("<sandbox>\n" "<user>\n" "a note from the job\n"
                          "scratch=<sandbox>\n" "greeting=hello_from_the_job_env\n" "pids\n"
                          "1\n" "the job is ours\n" "1\n")  # fmt: skip
    for line in ("T=<sandbox>/x", "_CONDOR_JOB_IWD=<sandbox>", "BATCH_SYSTEM=HTCondor",
                 "TMPDIR=<sandbox>", "OMP_NUM_THREADS=1"):  # fmt: skip
        assert f"\n{line}\n" in out, out
    assert ours["ended"] == theirs["ended"] == "(1) Normal termination (return value 0)"
    assert ours["out"] == theirs["out"] == "released\n"
    assert ours["returned"] == theirs["returned"] == []
    # execd: the shell in the job's slice, next to the job's own leaf
    job_line = next(line for line in ours["job cgroup"].splitlines() if line.startswith("0::"))
    assert job_line.endswith(".slice/job"), job_line
    assert ours["cgroup"][0] == 0
    assert ours["cgroup"][1].strip() == job_line.removesuffix("/job") + "/sshd"


@contextlib.contextmanager
def starters_reading(pool: harness.Pool, text: str) -> Iterator[None]:
    """condor_starters started meanwhile read `text` (each starter reads the config)."""
    path = pool.host_path(SSH_CONF_FILE)
    path.write_text(text)
    try:
        yield
    finally:
        path.unlink()


def ssh_to_a_job_not_to_be_entered(pool: harness.Pool) -> tuple[int, str, str]:
    with waiting_job(pool) as (job, release):
        seen = ssh(pool, f"{job.cluster}.0", "true")
        release.touch()
        job.wait_for_event("005", WAIT_S)
        code, out, err = seen
        return code, out, re.sub(r"slot\d+(_\d+)?@\S+:", "SLOT:", err)


def test_enable_ssh_to_job_false_refuses_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # fmt: skip
    """ENABLE_SSH_TO_JOB, an expression over the slot (MY) and the job (TARGET), false
    for this job: the same refusal from both starters."""
    ours, theirs = on_both(running_pool, ssh_to_a_job_not_to_be_entered, ssh_config + SSH_OFF,
                           lambda pool: starters_reading(pool, SSH_OFF))  # fmt: skip
    assert ours == theirs
    assert ours[0] != 0
    assert "Rejecting request, because ENABLE_SSH_TO_JOB=false" in ours[2]


def test_an_sshd_that_cannot_be_executed_is_refused_as_on_condor_startd(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # fmt: skip
    """SSH_TO_JOB_SSHD naming no program, on both: the setup runs, then the request is
    refused with condor_starter's words; the job goes on to its normal end."""
    ours, theirs = on_both(running_pool, ssh_to_a_job_not_to_be_entered, ssh_config + NO_SSHD,
                           lambda pool: starters_reading(pool, NO_SSHD))  # fmt: skip
    assert ours == theirs
    assert ours[0] != 0
    assert ("Failed, because sshd not correctly configured "
            "(SSH_TO_JOB_SSHD=/nonexistent/sshd): No such file or directory.") in ours[2]


def test_a_session_open_as_the_job_exits_ends_with_it(running_pool: harness.RunningPool,
                                                       ssh_config: str) -> None:  # fmt: skip
    """execd only: the job exits while an ssh session waits in it; the session ends
    (its sshd is killed with the job's slice), its directory is not sent back and
    the job terminates at once. condor_starter 25.14.1 differs here (docs/pool.md,
    Differences): it finishes the job only once the last session has closed."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, ssh_config)
        try:
            with waiting_job(pool) as (job, release):
                session = open_session(pool, f"{job.cluster}.0")
                try:
                    release.touch()
                    log = job.wait_for_event("005", WAIT_S)
                    assert session.wait(WAIT_S) is not None  # its connection closed
                finally:
                    if session.poll() is None:
                        os.killpg(session.pid, signal.SIGKILL)
                        session.wait()
                    if session.stdout is not None:
                        session.stdout.close()
        finally:
            node.stop(signal.SIGQUIT)
    assert "(1) Normal termination (return value 0)" in log
    assert job.output("out.txt") == "released\n"
    assert not [p.name for p in job.host_dir.iterdir() if "ssh_to_job" in p.name]


def test_a_session_goes_on_through_execds_restart_in_place(
        running_pool: harness.RunningPool, ssh_config: str) -> None:  # fmt: skip
    """execd only: SIGUSR2 (restart in place) while a session is open. Its sshd is the
    daemon's child, not the image's: the session stays open, a new condor_ssh_to_job
    after the restart works, and the job's exit ends the old session as usual."""
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp, ssh_config)
        try:
            with waiting_job(pool) as (job, release):
                job_id = f"{job.cluster}.0"
                session = open_session(pool, job_id)
                try:
                    node.send(signal.SIGUSR2)
                    node.wait_for("execd_stopped", how="restart")
                    node.wait_for("shadow_conversation_resumed")
                    after = ssh(pool, job_id, "cat note.txt; exit 4")
                    still_open = session.poll() is None
                    release.touch()
                    log = job.wait_for_event("005", WAIT_S)
                    assert session.wait(WAIT_S) is not None
                finally:
                    if session.poll() is None:
                        os.killpg(session.pid, signal.SIGKILL)
                        session.wait()
                    if session.stdout is not None:
                        session.stdout.close()
        finally:
            node.stop(signal.SIGQUIT)
    assert still_open
    assert after == (4, "a note from the job\n", "")
    assert "(1) Normal termination (return value 0)" in log
    assert not [p.name for p in job.host_dir.iterdir() if "ssh_to_job" in p.name]
