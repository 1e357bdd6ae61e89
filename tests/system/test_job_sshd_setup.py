"""condor_ssh_to_job's setup as execd starts it (execd.wire.job_sshd.run_setup): a fake
$(LIBEXEC)/condor_ssh_to_job_sshd_setup run through the root helper sshd_exec.py as
nobody, with a job environment its owner chose. Real processes, run as root."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from execd.wire.job_sshd import (
    SETUP_OUTPUT_BYTES,
    JobShell,
    SshdRefusedError,
    SshToJobConfig,
    run_setup,
)
from tests.starter_dirs import job_workdir

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
    config = libexec(workdir, SUCCESS + 'id -u; id -G; pwd; echo "$FROM_JOB"\n')
    output = asyncio.run(run_setup(job_shell(workdir, {"FROM_JOB": "yes"}), config,
                                   {"FROM_JOB": "yes"}, ""))  # fmt: skip
    lines = output.decode().splitlines()
    assert lines[1:] == [str(NOBODY), str(NOBODY), str(workdir / "iwd"), "yes"]


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
