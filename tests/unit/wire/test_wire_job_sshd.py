"""START_SSHD's checks before anything runs (execd.wire.job_sshd): condor_starter's
words for a LIBEXEC, template or ssh-keygen arguments it cannot use, SSH_TO_JOB_SSHD's
%f / %% expansion, and the setup output's markers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from execd.wire.job_sshd import (
    SshdRefusedError,
    SshToJobConfig,
    delimited,
    run_setup,
    sshd_argv,
)
from execd.wire.ssh_sessions import JobShell


def config(tmp_path: Path, **kw: str) -> SshToJobConfig:
    lib = tmp_path / "libexec"
    lib.mkdir(exist_ok=True)
    for name in ("condor_ssh_to_job_sshd_setup", "condor_ssh_to_job_shell_setup"):
        (lib / name).write_text("#!/bin/sh\n")
        (lib / name).chmod(0o755)
    template = tmp_path / "template"
    template.write_text("")
    sshd = tmp_path / "sshd"
    sshd.write_text("#!/bin/sh\n")
    sshd.chmod(0o755)
    values = {"libexec": str(lib), "config_template": str(template), "sshd": str(sshd),
              "sshd_args": "-i -e -f %f", "keygen": "/usr/bin/ssh-keygen",
              "keygen_args": '"-N \'\' -q"'} | kw  # fmt: skip
    return SshToJobConfig(**values)


def refusal(tmp_path: Path, cfg: SshToJobConfig, extra: str = "") -> str:
    shell = JobShell(tmp_path, "nobody", 65534, 65534, {}, [], None)
    with pytest.raises(SshdRefusedError) as refused:
        asyncio.run(run_setup(shell, cfg, {}, extra))
    return str(refused.value)


def test_a_setup_script_that_cannot_be_executed_is_named(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    (tmp_path / "libexec" / "condor_ssh_to_job_shell_setup").chmod(0o644)
    assert refusal(tmp_path, cfg) == (f"Cannot execute {tmp_path}/libexec/"
                                      "condor_ssh_to_job_shell_setup: Permission denied")
    assert refusal(tmp_path, config(tmp_path, libexec=str(tmp_path / "none"))) == (
        f"Cannot execute {tmp_path}/none/condor_ssh_to_job_sshd_setup: "
        "No such file or directory")  # fmt: skip


def test_a_missing_template_is_named(tmp_path: Path) -> None:
    assert refusal(tmp_path, config(tmp_path, config_template="")) == (
        "SSH_TO_JOB_SSHD_CONFIG_TEMPLATE and LIB are not defined.  "
        "At least one of them is required.")  # fmt: skip
    gone = str(tmp_path / "gone")
    assert refusal(tmp_path, config(tmp_path, config_template=gone)) == f"{gone} does not exist!"


def test_bad_keygen_arguments_are_named(tmp_path: Path) -> None:
    assert refusal(tmp_path, config(tmp_path, keygen_args='"-b 1')).startswith(
        "SSH_TO_JOB_SSH_KEYGEN_ARGS is misconfigured: ")  # fmt: skip
    assert refusal(tmp_path, config(tmp_path), extra="'-b").startswith(
        "Failed to produce ssh-keygen arg list: ")  # fmt: skip


def test_sshd_arguments_expand_f_and_percent(tmp_path: Path) -> None:
    cfg = config(tmp_path, sshd_args='"-i -f %f -o X=100%% -o Y=%f.d"')
    assert sshd_argv(cfg, "/s/sshd_config") == [
        cfg.sshd, "-i", "-f", "/s/sshd_config", "-o", "X=100%", "-o", "Y=/s/sshd_config.d"]


def test_an_unexpected_percent_in_the_sshd_arguments_is_refused(tmp_path: Path) -> None:
    cfg = config(tmp_path, sshd_args='"-i -f %x"')
    with pytest.raises(SshdRefusedError, match=r"^Unexpected %x in SSH_TO_JOB_SSHD_ARGS: "):
        sshd_argv(cfg, "/s/sshd_config")
    with pytest.raises(SshdRefusedError, match=r"^Unexpected %  in SSH_TO_JOB_SSHD_ARGS: "):
        sshd_argv(config(tmp_path, sshd_args='"-i 5%"'), "/s/sshd_config")


def test_an_sshd_that_cannot_be_executed_is_named(tmp_path: Path) -> None:
    cfg = config(tmp_path, sshd="/nonexistent/sshd")
    with pytest.raises(SshdRefusedError) as refused:
        sshd_argv(cfg, "/s/sshd_config")
    assert str(refused.value) == ("Failed, because sshd not correctly configured "
                                  "(SSH_TO_JOB_SSHD=/nonexistent/sshd): No such file or "
                                  "directory.")  # fmt: skip


def test_the_setup_output_between_markers_and_without_them() -> None:
    output = b"noise\nBEGIN\nthe value\nEND\nmore"
    assert delimited(output, "BEGIN\n", "\nEND\n") == b"the value"
    with pytest.raises(SshdRefusedError) as refused:
        delimited(b"-----BEGIN OPENSSH PRIVATE KEY-----\nsecret", "BEGIN\n", "\nEND\n")
    assert str(refused.value) == ("Failed to parse output of condor_ssh_to_job_sshd_setup: "
                                  "Failed to find 'BEGIN' in output of "
                                  "condor_ssh_to_job_sshd_setup")  # fmt: skip
    with pytest.raises(SshdRefusedError, match="Failed to find 'END'"):
        delimited(b"BEGIN\nthe value", "BEGIN\n", "\nEND\n")
