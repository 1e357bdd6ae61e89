"""condor_ssh_to_job's setup as execd starts it (execd.wire.job_sshd.run_setup): a fake
$(LIBEXEC)/condor_ssh_to_job_sshd_setup run through the root helper sshd_exec.py as
nobody, with a job environment its owner chose. Real processes, run as root."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from execd.starter.sshd_list import read_sessions, start_time
from execd.wire.channel import Channel
from execd.wire.job_sshd import (
    SETUP_OUTPUT_BYTES,
    SshdRefusedError,
    SshToJobConfig,
    run_setup,
    start_sshd,
)
from execd.wire.ssh_sessions import JobShell
from execd.wire.sshd_helper import EXEC_HELPER
from tests.starter_dirs import job_workdir
from tests.unit.wire.wire_pairs import channel_pair

NOBODY = 65534
SUCCESS = "echo condor_ssh_to_job_sshd_setup SUCCESS\n"

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the root helper switches ids: "
                                "these tests run as root")  # fmt: skip


@pytest.fixture
def workdir() -> Iterator[Path]:
    with job_workdir("execd-sshd-setup-") as path:
        yield path


def libexec(workdir: Path, setup_body: str) -> SshToJobConfig:
    """A LIBEXEC whose condor_ssh_to_job_sshd_setup is `setup_body` (a sh script)."""
    lib = workdir / "libexec"
    lib.mkdir(mode=0o755)
    (lib / "condor_ssh_to_job_sshd_setup").write_text("#!/bin/sh\n" + setup_body)
    (lib / "condor_ssh_to_job_shell_setup").write_text("#!/bin/sh\n")
    for script in lib.iterdir():
        script.chmod(0o755)
    template = workdir / "sshd_config_template"
    template.write_text("")
    return SshToJobConfig(str(lib), str(template), "/usr/sbin/sshd", "-i -e -f %f",
                          "/usr/bin/ssh-keygen", '"-N \'\' -q"')  # fmt: skip


def job_shell(workdir: Path, env: dict[str, str]) -> JobShell:
    return JobShell(workdir / "iwd", "nobody", NOBODY, NOBODY, env, [1], None)


def test_the_setup_runs_as_the_job_user_with_the_jobs_environment_and_no_groups(
        workdir: Path) -> None:  # fmt: skip
    config = libexec(workdir, SUCCESS + 'id -u; id -G; pwd; echo "$FROM_JOB"; '
                              'grep NoNewPrivs /proc/self/status\n')  # fmt: skip
    output = asyncio.run(run_setup(job_shell(workdir, {"FROM_JOB": "yes"}), config,
                                   {"FROM_JOB": "yes"}, ""))  # fmt: skip
    lines = output.decode().splitlines()
    # no setuid program gives it more than the job has (no_new_privs, as the job's)
    assert lines[1:] == [str(NOBODY), str(NOBODY), str(workdir / "iwd"), "yes",
                         "NoNewPrivs:\t1"]  # fmt: skip


def test_a_pythonpath_in_the_jobs_environment_does_not_reach_the_root_helper(
        workdir: Path) -> None:  # fmt: skip
    """The job's owner sets PYTHONPATH to a directory holding an `encodings` package:
    a Python started as root with it (even -S) imports it before anything else."""
    marker = workdir / "iwd" / "marker"
    evil = workdir / "iwd" / "evil" / "encodings"
    evil.mkdir(parents=True)
    (evil / "__init__.py").write_text(  # posix: the interpreter is not fully up yet
        f"import posix\nfd = posix.open({str(marker)!r}, posix.O_WRONLY | posix.O_CREAT"
        " | posix.O_APPEND, 0o644)\nposix.write(fd, b'uid %d\\n' % posix.getuid())\n"
        "raise ImportError('not the real encodings')\n")
    env = {"PYTHONPATH": str(evil.parent)}
    config = libexec(workdir, SUCCESS + 'echo "$PYTHONPATH"\n')
    try:
        output = asyncio.run(run_setup(job_shell(workdir, env), config, env, ""))
    except SshdRefusedError:  # the helper failed to start: it imported the package
        output = b""
    assert not marker.exists(), marker.read_text()
    assert output.decode().splitlines()[1:] == [str(evil.parent)]  # the setup gets it


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the preloaded library")
def test_an_ld_preload_in_the_jobs_environment_runs_only_as_the_job_user(
        workdir: Path) -> None:  # fmt: skip
    marker = workdir / "iwd" / "marker"
    source = workdir / "preload.c"
    source.write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void mark(void) {\n"
        f'  FILE *f = fopen("{marker}", "a");\n'
        '  if (f) { fprintf(f, "uid %d\\n", (int)getuid()); fclose(f); }\n}\n')
    library = workdir / "preload.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    library.chmod(0o755)
    env = {"LD_PRELOAD": str(library), "LD_LIBRARY_PATH": str(workdir)}
    asyncio.run(run_setup(job_shell(workdir, env), libexec(workdir, SUCCESS), env, ""))
    uids = set(marker.read_text().split("\n")[:-1])
    assert uids == {f"uid {NOBODY}"}  # the setup (sh) loaded it, as nobody; root never


def test_endless_setup_output_is_refused_at_the_cap_with_bounded_memory(
        workdir: Path) -> None:  # fmt: skip
    """The setup runs as the job's user, who can make it write without end (its
    sshkey a link to /dev/zero): the daemon stops reading past the cap and kills it."""
    config = libexec(workdir, "echo $$ > pid; exec yes\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    async def refused() -> str:
        with pytest.raises(SshdRefusedError) as refusal:
            await asyncio.wait_for(run_setup(job_shell(workdir, {}), config, {}, ""), 20)
        return str(refusal.value)

    message = asyncio.run(refused())
    assert message == ("condor_ssh_to_job_sshd_setup failed: output over "
                       f"{SETUP_OUTPUT_BYTES} bytes")  # fmt: skip
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < 64 * 1024
    assert not Path(f"/proc/{(workdir / 'iwd' / 'pid').read_text().strip()}").exists()


def test_a_failed_setups_output_is_cut_in_the_error(workdir: Path) -> None:
    config = libexec(workdir, "head -c 100000 /dev/zero | tr '\\0' x; exit 1\n")
    with pytest.raises(SshdRefusedError) as refusal:
        asyncio.run(run_setup(job_shell(workdir, {}), config, {}, ""))
    assert str(refusal.value) == ("condor_ssh_to_job_sshd_setup failed: " + "x" * 4096
                                  + " ... (100000 bytes)")  # fmt: skip


def helper(workdir: Path, args: list[str], env: bytes = b"") -> subprocess.CompletedProcess[str]:
    """sshd_exec.py run as the daemon runs it, its environment on a pipe."""
    read_end, write_end = os.pipe()
    os.write(write_end, env)
    os.close(write_end)
    try:
        return subprocess.run([sys.executable, "-I", "-S", EXEC_HELPER, str(read_end), *args],
                              pass_fds=(read_end,), env={"PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, check=False)  # fmt: skip
    finally:
        os.close(read_end)


def test_the_helper_refuses_to_run_a_program_as_root(workdir: Path) -> None:
    done = helper(workdir, ["-", "0", "0", str(workdir), "-", "--", "/bin/true"])
    assert (done.returncode, done.stderr) == (127, "sshd_exec: refusing to run as root\n")


def test_the_helper_enters_the_cgroup_before_it_switches_ids(workdir: Path) -> None:
    """CGROUP_PROCS is written as root (a file only root may write here): then the
    program runs as the user, with the pid written there and the piped environment."""
    procs = workdir / "cgroup.procs"
    procs.write_text("")
    procs.chmod(0o644)
    done = helper(workdir, [str(procs), str(NOBODY), str(NOBODY), str(workdir / "iwd"), "-",
                            "--", "/bin/sh", "-c", 'echo $$ $(id -u) "$A"'],
                  env=b"A=b c\0B=\0")  # fmt: skip
    assert done.returncode == 0, done.stderr
    pid, uid, value = done.stdout.split(maxsplit=2)
    assert (pid, uid, value) == (procs.read_text(), str(NOBODY), "b c\n")


def test_the_helpers_stderr_is_never_a_link_the_user_put_there(workdir: Path) -> None:
    link = workdir / "iwd" / "sshd.log"
    link.symlink_to(workdir / "root-owned")
    done = helper(workdir, ["-", str(NOBODY), str(NOBODY), str(workdir / "iwd"), str(link),
                            "--", "/bin/true"])  # fmt: skip
    assert done.returncode == 127
    assert "Too many levels of symbolic links" in done.stderr
    assert not (workdir / "root-owned").exists()


def test_a_setup_running_when_the_job_ends_is_killed_and_no_session_starts(
        workdir: Path) -> None:  # fmt: skip
    """JobShell.end (the job exited or its conversation ended) kills a setup still
    running; START_SSHD after it is refused before anything runs."""
    config = libexec(workdir, "echo $$ > pid; exec sleep 600\n")
    shell = job_shell(workdir, {})

    async def setup_then_end() -> str:
        running = asyncio.ensure_future(run_setup(shell, config, {}, ""))
        while not shell.setups:  # spawned: the daemon knows its pid
            await asyncio.sleep(0)
        shell.end()
        with pytest.raises(SshdRefusedError) as refused:
            await asyncio.wait_for(running, 20)
        return str(refused.value)

    assert asyncio.run(setup_then_end()).startswith("condor_ssh_to_job_sshd_setup failed")
    assert not shell.setups
    with pytest.raises(SshdRefusedError, match=r"^Rejecting request, because the job is "
                                               r"finished\.$"):  # fmt: skip
        asyncio.run(start_sshd(cast(Channel, None), shell, config, {}, "1.0"))


MARKED = """mkdir "$1/.condor_ssh_to_job_1"
echo condor_ssh_to_job_sshd_setup SUCCESS
echo condor_ssh_to_job_sshd_setup SSHD DIR BEGIN; echo "$1/.condor_ssh_to_job_1"
echo condor_ssh_to_job_sshd_setup SSHD DIR END
echo condor_ssh_to_job_sshd_setup SSHD USER BEGIN; echo nobody
echo condor_ssh_to_job_sshd_setup SSHD USER END
echo condor_ssh_to_job_sshd_setup PUBLIC SERVER KEY BEGIN; echo host
echo condor_ssh_to_job_sshd_setup PUBLIC SERVER KEY END
echo condor_ssh_to_job_sshd_setup AUTHORIZED CLIENT KEY BEGIN; echo client
echo condor_ssh_to_job_sshd_setup AUTHORIZED CLIENT KEY END
"""


def test_a_session_into_an_interactive_job_whose_starter_stopped_waiting_is_refused(
        workdir: Path) -> None:  # fmt: skip
    """Once an interactive job's starter has stopped waiting for sessions (its last
    sshd gone: execd.starter.sshd_list), a START_SSHD whose setup was under way is
    refused as condor_starter refuses it, its session directory removed, the client
    never answered (before: it was answered and its sshd killed with the slice)."""
    config = libexec(workdir, MARKED)
    listed = workdir / "execute" / "ssh_sessions"
    Path(f"{listed}.finished").touch()  # what the starter's last look left
    shell = JobShell(workdir / "iwd", "nobody", NOBODY, NOBODY, {}, [], None,
                     interactive=True, sshds_file=listed)  # fmt: skip
    with pytest.raises(SshdRefusedError, match=r"^Rejecting request, because the job is "
                                               r"finished\.$"):  # fmt: skip
        asyncio.run(start_sshd(cast(Channel, None), shell, config, {}, "1.0"))
    assert not (workdir / "iwd" / ".condor_ssh_to_job_1").exists()
    assert not list(listed.parent.glob("ssh_sessions.starting.*"))


def test_an_interactive_jobs_sshd_is_listed_before_its_start_is_released(
        workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The client is answered, the sshd started and listed for the starter, and only
    then is the start's mark released: the starter, which looks at the marks before the
    list, always sees one or the other (execd.starter.sshd_list). `sleep 600` stands
    for sshd (none here), started by the root helper as the job's user."""
    config = dataclasses.replace(libexec(workdir, MARKED), sshd="/bin/sleep",
                                 sshd_args='"600"')  # (no sshd here)
    listed = workdir / "execute" / "ssh_sessions"
    shell = JobShell(workdir / "iwd", "nobody", NOBODY, NOBODY, {}, [], None,
                     interactive=True, sshds_file=listed)  # fmt: skip
    at_release: list[object] = []
    reserve = shell.reserve_sshd

    async def watched_reserve() -> Callable[[], None] | None:
        release = await reserve()
        assert release is not None

        def watched() -> None:
            at_release.append((read_sessions(listed), sorted(listed.parent.glob("*.starting.*"))))
            release()
        return watched

    monkeypatch.setattr(shell, "reserve_sshd", watched_reserve)

    async def scenario() -> tuple[bytes, int]:
        ours, client = await channel_pair()
        await start_sshd(ours, shell, config, {}, "1.0")
        answer = await client.recv()
        (pid, reaped), = shell.sshds.items()
        assert at_release[0][0] == [(pid, start_time(pid))]  # listed while it runs
        os.kill(pid, 9)
        await reaped
        await client.close()
        return answer, pid

    answer, pid = asyncio.run(scenario())
    assert b"SSHPrivateClientKey" in answer  # the client was answered
    (sessions, marks), = at_release
    assert [p for p, _start in sessions] == [pid] and len(marks) == 1  # its mark still there
    assert read_sessions(listed) == []  # reaped: no longer listed
    assert not list(listed.parent.glob("*.starting.*"))  # released
