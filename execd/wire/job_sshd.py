"""START_SSHD: condor_ssh_to_job into a running job, as condor_starter serves it.

On a job owner's session (execd.wire.job_owner_session) condor_ssh_to_job sends one ad
({Shell, Name, SSHKeyGenArgs}, each optional). As condor_starter's startSSHD
(starter.cpp), execd then, in its order: refuses while ENABLE_SSH_TO_JOB is false, asks
to retry while the job's environment is not ready (input still arriving), refuses a job
that has exited, asks to retry while it is suspended; runs HTCondor's
`$(LIBEXEC)/condor_ssh_to_job_sshd_setup SANDBOX SHELL_SETUP CONFIG_TEMPLATE KEYGEN_CMD`
as the job's user, in the sandbox, with the job's environment (plus `_CONDOR_SLOT_NAME`,
`_CONDOR_SHELL`, `_CONDOR_JOB_PIDS`), which makes `.condor_ssh_to_job_N/` there (a host
key that is also the client's key, authorized_keys forcing condor_ssh_to_job_shell_setup,
sshd_config) and prints them between its markers; answers {Result = true, RemoteUser,
SSHPublicServerKey, SSHPrivateClientKey} (the keys in 64-column base64, as
condor_base64_encode writes them); and hands the connection's socket to
`SSH_TO_JOB_SSHD SSH_TO_JOB_SSHD_ARGS` (`-i -e -f %f`: %f the session's sshd_config) as
its stdin and stdout, its stderr the session's sshd.log. A failure answers Result =
false with condor_starter's ErrorString; the job and the daemon go on.

Both programs run as the job's user (never root), in `<slot>.slice/sshd` next to the
job's leaf (condor_starter puts its sshd in `<job cgroup>/sshd`): the job's limits
count them, a suspend freezes them and the job's end kills them. Nothing else is
inherited (close_fds); each runs in a session of its own, which execd also kills when
the job's conversation ends (where there is no cgroup). The session directory is
removed when its sshd exits, as condor_starter's SSHDProc does, so it is not sent back
as output (execd.wire.ssh_sessions: JobShell, the sessions' end and their directories'
removal). The private key is never logged.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from execd.log import get_logger
from execd.wire.channel import Channel
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad
from execd.wire.condor_args import condor_base64, split_args_v2, split_quoted_args
from execd.wire.job_runner import wait_status
from execd.wire.ssh_sessions import JobShell, remove_session
from execd.wire.sshd_helper import (
    OutputTooLongError,
    helper_argv,
    kill_session,
    read_capped,
    spawn_helper,
)

if TYPE_CHECKING:
    from execd.config.settings import Settings

log = get_logger("wire")
SETUP_TIMEOUT_S = 60.0  # condor_starter waits without limit; a hung setup must not pile up
# The setup's keys are a few KiB; -keygen-options -b 16384 makes them ~25 KiB.
SETUP_OUTPUT_BYTES = 1 << 20
SETUP_ERROR_BYTES = 4096  # of a failed setup's output, in ErrorString and the log
SUCCESS = b"condor_ssh_to_job_sshd_setup SUCCESS"
REQUEST_ATTRS = ("Name", "Shell", "SSHKeyGenArgs")
REQUEST_TEXT_BYTES = 4096  # a longer value is left out
HELPER_ERROR_BYTES = 4096  # of what sshd_exec.py says before its stderr is sshd.log
FINISHED = "Rejecting request, because the job is finished."


@dataclass(frozen=True)
class SshToJobConfig:
    """The knobs condor_starter reads at each START_SSHD."""

    libexec: str
    config_template: str
    sshd: str
    sshd_args: str
    keygen: str
    keygen_args: str
    # $(LIB)/libgetpwnam.so, preloaded into the setup and sshd where it exists
    # (CONDOR_SSH_TO_JOB_FAKE_PASSWD_ENTRY): the job's user as sshd sees it has no
    # password lock, the sandbox as home and _CONDOR_SHELL (else /bin/bash) as shell.
    fake_passwd: str = ""

    @classmethod
    def from_settings(cls, settings: Settings) -> SshToJobConfig:
        def text(name: str) -> str:
            return settings.get_str(name) or ""

        template = text("SSH_TO_JOB_SSHD_CONFIG_TEMPLATE") or (
            f"{text('LIB')}/condor_ssh_to_job_sshd_config_template" if text("LIB") else "")
        fake = f"{text('LIB')}/libgetpwnam.so" \
            if settings.get_bool("CONDOR_SSH_TO_JOB_FAKE_PASSWD_ENTRY", True) else ""  # fmt: skip
        return cls(text("LIBEXEC"), template,
                   text("SSH_TO_JOB_SSHD"), text("SSH_TO_JOB_SSHD_ARGS"),
                   text("SSH_TO_JOB_SSH_KEYGEN"), text("SSH_TO_JOB_SSH_KEYGEN_ARGS"),
                   fake)  # fmt: skip


class SshdRefusedError(Exception):
    """START_SSHD answered Result = false (retry: with Retry = true)."""

    def __init__(self, message: str, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


def delimited(output: bytes, begin: str, end: str) -> bytes:
    start = output.find(begin.encode())
    if start < 0:
        raise SshdRefusedError(f"Failed to parse output of condor_ssh_to_job_sshd_setup: "
                          f"Failed to find '{begin.strip()}' in output of "
                          f"condor_ssh_to_job_sshd_setup")  # fmt: skip
    start += len(begin)
    stop = output.find(end.encode(), start)
    if stop < 0:
        raise SshdRefusedError(f"Failed to parse output of condor_ssh_to_job_sshd_setup: "
                          f"Failed to find '{end.strip()}' in output of "
                          f"condor_ssh_to_job_sshd_setup")  # fmt: skip
    return output[start:stop]


def _cannot_execute(path: str) -> str | None:
    """condor_starter's access(X_OK) check: the strerror it names, or None."""
    try:
        if os.access(path, os.X_OK):
            return None
        os.stat(path)
        return os.strerror(13)  # exists but not executable: EACCES
    except OSError as exc:
        return exc.strerror or str(exc)


def _helper(shell: JobShell, cgroup: Path | None, stderr: str, program: list[str]) -> list[str]:
    procs = str(cgroup / "cgroup.procs") if cgroup is not None else "-"
    return helper_argv(procs, (shell.uid, shell.gid), str(shell.sandbox), stderr, program)


def _sshd_cgroup(shell: JobShell) -> Path | None:
    if shell.cgroup is None:
        return None
    try:
        shell.cgroup.mkdir(exist_ok=True)
    except OSError as exc:  # the slice is gone (the job is ending) or not ours
        raise SshdRefusedError(f"Failed to create the sshd's cgroup {shell.cgroup}: "
                          f"{exc.strerror}") from None  # fmt: skip
    return shell.cgroup


def setup_env(shell: JobShell, config: SshToJobConfig,
              request_env: dict[str, str]) -> dict[str, str]:  # fmt: skip
    """The environment of the setup script and of sshd: the job's (as the starter
    gave it), with the request's additions, its working directory and pids and the
    fake passwd entry's preload, as condor_starter's GetJobEnv and startSSHD."""
    env = {**shell.env, **request_env}
    env["_CONDOR_JOB_IWD"] = str(shell.iwd or shell.sandbox)  # the session's start
    env["_CONDOR_JOB_PIDS"] = " ".join(str(pid) for pid in shell.live_pids())
    if config.fake_passwd and os.path.exists(config.fake_passwd):
        env["LD_PRELOAD"] = config.fake_passwd
    return env


async def run_setup(shell: JobShell, config: SshToJobConfig, env: dict[str, str],
                    keygen_extra: str) -> bytes:  # fmt: skip
    """condor_ssh_to_job_sshd_setup's output (SshdRefusedError when it failed)."""
    setup = f"{config.libexec}/condor_ssh_to_job_sshd_setup"
    shell_setup = f"{config.libexec}/condor_ssh_to_job_shell_setup"
    for program in (setup, shell_setup):
        if (why := _cannot_execute(program)) is not None:
            raise SshdRefusedError(f"Cannot execute {program}: {why}")
    if not config.config_template:
        raise SshdRefusedError("SSH_TO_JOB_SSHD_CONFIG_TEMPLATE and LIB are not defined.  "
                          "At least one of them is required.")  # fmt: skip
    if not os.path.exists(config.config_template):
        raise SshdRefusedError(f"{config.config_template} does not exist!")
    try:
        keygen = [config.keygen, *split_quoted_args(config.keygen_args)]
    except ValueError as exc:
        raise SshdRefusedError(f"SSH_TO_JOB_SSH_KEYGEN_ARGS is misconfigured: {exc}") from None
    try:
        keygen += split_args_v2(keygen_extra)
    except ValueError as exc:
        raise SshdRefusedError(f"Failed to produce ssh-keygen arg list: {exc}") from None
    argv = [setup, str(shell.sandbox), shell_setup, config.config_template,
            " ".join(shlex.quote(arg) for arg in keygen)]  # fmt: skip
    read_end, write_end = os.pipe()
    try:
        proc = await spawn_helper(
            _helper(shell, _sshd_cgroup(shell), "-", argv), env,
            stdin=asyncio.subprocess.DEVNULL, stdout=write_end,
            stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    shell.setups.add(proc.pid)
    try:
        output = await asyncio.wait_for(read_capped(read_end, proc, SETUP_OUTPUT_BYTES),
                                        SETUP_TIMEOUT_S)  # fmt: skip
    except BaseException as exc:  # also cancelled (the job ends): the setup ends too
        kill_session(proc.pid)
        if not isinstance(exc, (TimeoutError, OutputTooLongError)):
            raise
        await proc.wait()
        why = (f"no answer within {SETUP_TIMEOUT_S:.0f} s" if isinstance(exc, TimeoutError)
               else f"output over {SETUP_OUTPUT_BYTES} bytes")  # fmt: skip
        raise SshdRefusedError(f"condor_ssh_to_job_sshd_setup failed: {why}") from None
    finally:
        shell.setups.discard(proc.pid)
    if SUCCESS not in output:
        text = output[:SETUP_ERROR_BYTES].decode(errors="replace")
        if len(output) > SETUP_ERROR_BYTES:
            text += f" ... ({len(output)} bytes)"
        raise SshdRefusedError(f"condor_ssh_to_job_sshd_setup failed: {text}")
    return output


def sshd_argv(config: SshToJobConfig, sshd_config: str) -> list[str]:
    """SSH_TO_JOB_SSHD with SSH_TO_JOB_SSHD_ARGS, %f the session's sshd_config."""
    if _cannot_execute(config.sshd) is not None:
        raise SshdRefusedError(f"Failed, because sshd not correctly configured "
                          f"(SSH_TO_JOB_SSHD={config.sshd}): "
                          f"{_cannot_execute(config.sshd)}.")  # fmt: skip
    try:
        args = split_quoted_args(config.sshd_args)
    except ValueError as exc:
        raise SshdRefusedError(f"Invalid SSH_TO_JOB_SSHD_ARGS ({config.sshd_args}): "
                               f"{exc}") from None  # fmt: skip
    expanded = []
    for arg in args:
        out, i = [], 0
        while i < len(arg):
            if arg[i] == "%":
                nxt = arg[i + 1:i + 2]
                if nxt not in ("%", "f"):
                    raise SshdRefusedError(f"Unexpected %{nxt or ' '} in SSH_TO_JOB_SSHD_ARGS: "
                                      f"{config.sshd_args}")  # fmt: skip
                out.append("%" if nxt == "%" else sshd_config)
                i += 2
            else:
                out.append(arg[i])
                i += 1
        expanded.append("".join(out))
    return [config.sshd, *expanded]


def request_env(request: dict[str, object]) -> dict[str, str]:
    """What the request's Name and Shell add to the setup's environment."""
    env = {}
    name = request.get("Name")
    if isinstance(name, str) and name:
        env["_CONDOR_SLOT_NAME"] = name
    shells = request.get("Shell")
    if isinstance(shells, str):
        for shell in (s.strip() for s in shells.split(",")):
            if shell and os.access(shell, os.X_OK):
                env["_CONDOR_SHELL"] = shell
                break
    return env


async def start_sshd(channel: Channel, shell: JobShell, config: SshToJobConfig,
                     request: dict[str, object], job: str) -> None:  # fmt: skip
    """Set up the session, answer the client, and hand its connection to sshd."""
    if shell.closing:
        raise SshdRefusedError(FINISHED)
    extra = request.get("SSHKeyGenArgs")
    env = setup_env(shell, config, request_env(request))
    output = await run_setup(shell, config, env, extra if isinstance(extra, str) else "")
    session_dir = delimited(output, "condor_ssh_to_job_sshd_setup SSHD DIR BEGIN\n",
                            "\ncondor_ssh_to_job_sshd_setup SSHD DIR END\n").decode(
        errors="surrogateescape")  # fmt: skip
    user = delimited(output, "condor_ssh_to_job_sshd_setup SSHD USER BEGIN\n",
                     "\ncondor_ssh_to_job_sshd_setup SSHD USER END\n").decode(errors="replace")
    host_key = delimited(output, "condor_ssh_to_job_sshd_setup PUBLIC SERVER KEY BEGIN\n",
                         "condor_ssh_to_job_sshd_setup PUBLIC SERVER KEY END\n")
    client_key = delimited(output, "condor_ssh_to_job_sshd_setup AUTHORIZED CLIENT KEY BEGIN\n",
                           "condor_ssh_to_job_sshd_setup AUTHORIZED CLIENT KEY END\n")
    session = Path(session_dir)
    if session.parent != shell.sandbox or not session.name.startswith(".condor_ssh_to_job_"):
        raise SshdRefusedError(f"condor_ssh_to_job_sshd_setup named {session_dir}, "
                          f"not a session directory in {shell.sandbox}")  # fmt: skip
    release = await shell.reserve_sshd()  # (an interactive job's starter: finished?)
    if release is None:
        await asyncio.to_thread(remove_session, session)
        raise SshdRefusedError(FINISHED)
    try:
        try:
            if shell.closing:  # the job exited while the setup ran
                raise SshdRefusedError(FINISHED)
            argv = sshd_argv(config, str(session / "sshd_config"))
        except SshdRefusedError:
            await asyncio.to_thread(remove_session, session)
            raise
        reply = from_values({"Result": True, "RemoteUser": user,
                             "SSHPublicServerKey": condor_base64(host_key),
                             "SSHPrivateClientKey": condor_base64(client_key)})  # fmt: skip
        await channel.send(encode_ad(channel.encoder(), reply).payload())
        sock = channel.writer.get_extra_info("socket")
        if sock is None or shell.closing:
            await asyncio.to_thread(remove_session, session)
            return
        fd = os.dup(sock.fileno())
        try:
            channel.writer.close()  # the daemon's side: nothing more is read or written here
            os.set_blocking(fd, True)  # as sshd gets a ReliSock's descriptor from condor
            proc = await spawn_helper(
                _helper(shell, _sshd_cgroup(shell), str(session / "sshd.log"), argv), env,
                stdin=fd, stdout=fd, stderr=asyncio.subprocess.PIPE)  # fmt: skip
        except (OSError, SshdRefusedError) as exc:
            log.warning("sshd_not_started", job=job, error=str(exc))
            await asyncio.to_thread(remove_session, session)
            return
        finally:
            os.close(fd)
        shell.sshd_started(proc.pid)  # (before the loop runs: the session's login is later)
        shell.sshds[proc.pid] = asyncio.get_running_loop().create_task(
            _reap(shell, proc, session, job))  # fmt: skip
        if shell.closing:  # the job exited while it was started: end() did not see it
            kill_session(proc.pid)
        log.info("sshd_started", job=job, pid=proc.pid, session=session.name, user=user)
    finally:
        release()


async def _reap(shell: JobShell, proc: asyncio.subprocess.Process, session: Path,
                job: str) -> None:  # fmt: skip
    # The helper's stderr until it redirects it to sshd.log: why it failed, if it did
    # (entering the cgroup, the ids, the directory; exit 127). One line; capped.
    assert proc.stderr is not None
    said = b""
    while chunk := await proc.stderr.read(4096):
        said = (said + chunk)[:HELPER_ERROR_BYTES]
    status = await proc.wait()
    shell.sshds.pop(proc.pid, None)
    shell.sshd_reaped(proc.pid, wait_status(status))
    await asyncio.to_thread(remove_session, session)
    log.info("sshd_exited", job=job, pid=proc.pid, status=status, session=session.name)
    if said:
        log.warning("sshd_not_started", job=job, pid=proc.pid,
                    error=said.decode(errors="replace").strip())  # fmt: skip


async def serve_start_sshd(channel: Channel, shell: JobShell | None, *, job: str,
                           enabled: Callable[[], bool], finished: bool,
                           suspended: bool, config: SshToJobConfig) -> None:  # fmt: skip
    """START_SSHD on the job owner's session: answered as condor_starter answers it."""
    wire = decode_ad(channel.decoder(await channel.recv()), "START_SSHD ad")
    # Only the three attributes condor_ssh_to_job sends, as literals (never evaluated).
    ad = to_classad({key: text for key, text in wire.items()
                     if key in REQUEST_ATTRS and len(text) <= REQUEST_TEXT_BYTES})
    wanted = {key: ad[key] for key in ad}
    try:
        if not enabled():
            raise SshdRefusedError("Rejecting request, because ENABLE_SSH_TO_JOB=false")
        if shell is None and not finished:
            raise SshdRefusedError("Retrying request, because the job execution environment "
                              "is not yet ready.", retry=True)  # fmt: skip
        if finished or shell is None:
            raise SshdRefusedError(FINISHED)
        if suspended:
            raise SshdRefusedError("This slot is currently suspended.", retry=True)
        await start_sshd(channel, shell, config, wanted, job)
    except SshdRefusedError as exc:
        message = str(exc).strip()  # as condor_starter trims it
        log.warning("start_sshd_refused", job=job, why=message, retry=exc.retry)
        values: dict[str, object] = {"Result": False, "ErrorString": message}
        if exc.retry:
            values["Retry"] = True
        await channel.send(encode_ad(channel.encoder(), from_values(values)).payload())
