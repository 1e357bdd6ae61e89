"""The starter's whole conversation with a real condor_shadow, after ACTIVATE_CLAIM.

`serve_shadow(channel, claim, job_ad)` is called with the activation socket once execd
has answered ACTIVATE_CLAIM with OK. In the order HTCondor's starter uses
(condor_starter.V6.1/jic_shadow.cpp, job1.pcap):

get_job_info -> register_starter_info (our CondorVersion, slot name, scratch dir, the
slot's resources) -> get_sec_session_info (the filetrans session) -> input transfer
(FILETRANS_UPLOAD on the job's TransferSocket) -> register_job_info (the resources
provisioned) -> begin_execution -> the job runs;
register_job_info at start and every `update_interval_s` -> event_notification
(ActivationExecutionExit) -> register_job_info with the exit -> output transfer
(FILETRANS_DOWNLOAD) -> job_exit (wait status, reason 100, exit ad).

Cancelling the task that runs serve_shadow kills the job. The job is run by
`options.runner` (execd/wire/job_runner.py): a plain process by default, execd's own
starter under `execd run`; a job killed on request (vacate, remove) gets job_exit with
JOB_SHOULD_REQUEUE and no output transfer, as HTCondor's starter does, unless it asked for
`when_to_transfer_output = ON_EXIT_OR_EVICT` and was vacated gracefully: then its sandbox
goes to the shadow first (a non-final transfer, which the shadow spools).
A shadow that goes away while the job runs may come back (its schedd restarted): the
job's ShadowLink (shadow_link.py) waits for the reconnect for the job lease and moves
the conversation to the new connection; a lease that runs out kills the job.

A transfer that fails with a hold code becomes a critical RemoteErrorEvent (ulog):
the shadow puts the job on hold with that code, as it does for HTCondor's starter.
The conversation's end (the exit, the output, job_exit, a hold, the sandbox's removal)
is execd/wire/shadow_end.py's; its record for a restart in place (`Conversation`, made
once the job runs) execd/wire/conversation_record.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import pwd
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execd.cgroups.tree import JobCgroup
from execd.claims.ids import ClaimId
from execd.log import get_logger
from execd.starter.sandbox import give_to_user
from execd.wire.channel import Channel
from execd.wire.chirp_config import ChirpConfig
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.chirp_start import open_chirp_proxy
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.conversation_record import Conversation
from execd.wire.filetransfer import (
    FILETRANS_UPLOAD,
    TransferResult,
    TransferTally,
    download_sandbox,
)
from execd.wire.handover import hand_over
from execd.wire.job_peek import job_files
from execd.wire.job_runner import JobExit, JobHeldError, JobLaunch, JobRunner, RunnerFactory
from execd.wire.output_files import (
    expand_outputs,
    sent_std_files,
    std_files,
)
from execd.wire.proxy_refresh import proxy_target
from execd.wire.sandbox_upload import sandbox_baseline, upload_sandbox
from execd.wire.security import (
    CONDOR_VERSION,
)
from execd.wire.shadow_end import (
    close_conversation,
    conclude,
    report_hold,
    send_output,
    transfer_error,
)
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_job import (
    JobProcess,
    job_argv,
    job_env,
    proxy_name,
    run_as_user,
    shared_fs_launch,
    starter_job_ad,
    wants_transfer,
    write_job_ads,
)
from execd.wire.shadow_link import LIVE_LINKS, ShadowLink, ShadowLinks
from execd.wire.shadow_syscalls import (
    MessageChannel,
    ShadowSyscalls,
    send_update,
)
from execd.wire.shadow_transfers import Transfers, job_values
from execd.wire.slot_resources import (
    nested_slot_ad,
    provisioned_resources,
    starter_info_resources,
)
from execd.wire.ssh_sessions import JobShell, is_interactive
from execd.wire.streamed_output import StreamedOutput
from execd.wire.transfer_plugins import PLUGIN_LIFETIME_S, PluginTable
from execd.wire.url_inputs import job_url_inputs

log = get_logger("wire")
SHADOW_SETTLE_S = 0.1
STARTER_UPDATE_INTERVAL_S = 300
SYSCALL_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ShadowOptions:
    execute_dir: Path = Path("/var/lib/execd/execute")
    slot_name: str = field(default_factory=lambda: f"slot1@{socket.gethostname()}")
    uid_domain: str = field(default_factory=socket.gethostname)
    filesystem_domain: str = ""  # "": uid_domain (ShouldTransferFiles = IF_NEEDED)
    run_as_fallback: str = "nobody"
    update_interval_s: float = STARTER_UPDATE_INTERVAL_S
    # The first update after this long (STARTER_INITIAL_UPDATE_INTERVAL, 8 s in HTCondor,
    # capped by update_interval_s): a job that ends sooner sends none. 0: one at once.
    initial_update_s: float = 0.0
    # How long a call waits for the shadow's answer (STARTER_UPLOAD_TIMEOUT).
    syscall_timeout_s: float = SYSCALL_TIMEOUT_S
    condor_version: str = CONDOR_VERSION
    keep_sandbox: bool = False
    links: ShadowLinks = LIVE_LINKS  # where the shadow's reconnect finds the job
    # What runs the job: a plain process here; execd's starter under `execd run`.
    runner: RunnerFactory = JobProcess.from_launch
    # Told once the job runs, with what it takes to go on after a restart in place.
    on_running: Callable[[Conversation], None] | None = None
    # Asked when the conversation is cancelled, with the shadow's connection if it is
    # between two calls and the job's Chirp proxy if it has one: True when the daemon
    # restarts in place and its next image goes on with the conversation (and with the
    # proxy's listening socket: ChirpProxy.export_listener; execd/wire/shadow_resume.py);
    # the sandbox then stays.
    # (connection, Chirp proxy, streamed output's records: StreamedOutput.export, the
    # latest shadow's transfer socket and key if a reconnect brought them: a secret)
    handover: Callable[[MessageChannel | None, ChirpProxy | None, dict[str, Any] | None,
                        tuple[str, str] | None], bool] | None = None  # fmt: skip
    # The claimed slot's ad (a classad2 ClassAd): its resources go to the shadow, which
    # shows them in the user log (slot_resources.py). None: none are sent.
    slot_ad: Any = None
    # The slot's public ad as execd advertises it: nested in register_starter_info as
    # `SlotAd` (slot_resources.py). None: none is sent.
    published_slot_ad: WireAd | None = None
    # Told at the job's end the bytes its input and output transfers moved.
    on_transferred: Callable[[int, int], None] | None = None
    # Asked at each condor_tail request with the job's ad: may its files be read
    # (ENABLE_PEEK_JOB)? None: always.
    peek_enabled: Callable[[dict[str, object]], bool] | None = None
    # The same for condor_ssh_to_job (ENABLE_SSH_TO_JOB); None: always.
    ssh_enabled: Callable[[dict[str, object]], bool] | None = None
    # The cgroup directory a job's sshd runs in (created at its first use); None: none.
    sshd_cgroup: Callable[[], Path | None] | None = None
    # The file listing an interactive job's sshds for its starter (execd.starter.sshd_list).
    sshds_file: Callable[[], Path | None] | None = None
    # Is the job suspended now? (condor_ssh_to_job is told to retry.) None: never.
    suspended: Callable[[], bool] | None = None
    # Told each job update sent to the shadow (register_job_info's ad), as condor_starter
    # sends it to its startd too: the startd's copy of the job ad (its history record).
    on_update: Callable[[WireAd], None] | None = None
    # Asked as a restarted daemon resumes the conversation: does the schedd still hold
    # the claim? False: it released it meanwhile (no shadow comes back). None: always.
    claim_held: Callable[[], bool] | None = None
    # Awaited before the sandbox is removed (or kept, or handed over): whatever writes
    # into it from outside the conversation (the slot's .update.ad) stops first.
    before_removal: Callable[[], Awaitable[None]] | None = None
    # The ENABLE_CHIRP* knobs as this job's starter reads them (at its start).
    chirp: ChirpConfig = field(default_factory=ChirpConfig)
    # The node's file transfer plugins (FILETRANSFER_PLUGINS), for URL input files;
    # None: URL transfers are off. Each run may take plugin_timeout_s.
    plugins: PluginTable | None = None
    plugin_timeout_s: float = PLUGIN_LIFETIME_S
    # The cgroup each plugin run is made in and killed with (the slot's `.plugins`
    # slice); None: no cgroup v2 delegation, the job's own plugins are refused.
    plugin_cgroup: JobCgroup | None = None
    # STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS for a job (its ad's values):
    # 0 allow, 2 ignore, else refuse its own plugins. None: allow.
    job_plugin_mode: Callable[[dict[str, object]], int] | None = None


def _starter_ad(options: ShadowOptions, sandbox: Path, address: str) -> WireAd:
    resources = starter_info_resources(options.slot_ad) if options.slot_ad is not None else {}
    return resources | from_values({
        "Name": options.slot_name, "Machine": socket.gethostname(),
        "MyAddress": address, "StarterIpAddr": address,
        "UidDomain": options.uid_domain, "FileSystemDomain": options.uid_domain,
        "HasReconnect": True, "CondorVersion": options.condor_version,
        "MyCurrentTime": int(time.time()), "CondorScratchDir": str(sandbox),
    })  # fmt: skip


async def watch(calls: ShadowSyscalls, proc: JobRunner, options: ShadowOptions,
                wait_s: float) -> JobExit:  # fmt: skip
    """Updates to the shadow (the first after wait_s, 0: at once), until the job ends;
    whatever ends the conversation meanwhile ends the job."""
    interval = {"_condor_JOBINFO_MAXINTERVAL": str(int(options.update_interval_s))}
    try:
        if wait_s <= 0:  # an update at once, then every interval
            await send_update(calls, {**(await proc.usage()), **interval}, options.on_update)
            wait_s = options.update_interval_s
        while (done := await proc.wait(wait_s)) is None:
            await send_update(calls, {**(await proc.usage()), **interval}, options.on_update)
            wait_s = options.update_interval_s
    finally:
        proc.kill()
    return done


async def _run_job(calls: ShadowSyscalls, proc: JobRunner, options: ShadowOptions,
                   started: Callable[[int], None] | None = None) -> JobExit:  # fmt: skip
    await calls.begin_execution()  # before the process, as HTCondor's starter (001 event)
    pid = await proc.start()
    if started is not None:
        started(pid)
    return await watch(calls, proc, options,
                       min(options.initial_update_s, options.update_interval_s))  # fmt: skip


def ssh_policy(link: ShadowLink, options: ShadowOptions, job: dict[str, object]) -> None:
    """ENABLE_SSH_TO_JOB and the job's suspension, as condor_ssh_to_job is answered."""
    if options.ssh_enabled is not None:
        link.ssh_enabled = functools.partial(options.ssh_enabled, job)
    if options.suspended is not None:
        link.suspended = options.suspended


def job_shell(options: ShadowOptions, user: pwd.struct_passwd, sandbox: Path,
              env: dict[str, str], pid: int, *, iwd: Path | None = None,
              interactive: bool = False) -> JobShell:  # fmt: skip
    """What condor_ssh_to_job needs of the running job (execd.wire.job_sshd)."""
    cgroup = options.sshd_cgroup() if options.sshd_cgroup is not None else None
    listed = options.sshds_file() if options.sshds_file is not None else None
    return JobShell(sandbox, user.pw_name, user.pw_uid, user.pw_gid, dict(env),
                    [pid] if pid > 0 else [], cgroup, iwd=iwd or sandbox,
                    interactive=interactive, sshds_file=listed)  # fmt: skip


async def serve_shadow(channel: MessageChannel, claim: ClaimId | str,
                       job_ad: Mapping[str, str] | Sequence[tuple[str, str]], *,
                       options: ShadowOptions | None = None) -> None:  # fmt: skip
    """Run the job the shadow activated, start to finish, on the activation socket.

    `channel` is the authenticated, encrypted activation connection (OK already sent);
    `job_ad` the ACTIVATE_CLAIM ad (the shadow's get_job_info answer supersedes it).
    Returns when job_exit was answered; raises ProtocolError if the shadow goes away.
    """
    options = options or ShadowOptions()
    claim_text = claim.full() if isinstance(claim, ClaimId) else claim
    address = claim_text.split("#", 1)[0]
    calls = ShadowFileCalls(channel, timeout_s=options.syscall_timeout_s)  # and Chirp's
    job_wire = await calls.get_job_info() or dict(job_ad)
    job = job_values(job_wire)
    gjid = str(job.get("GlobalJobId", "?"))
    options.execute_dir.mkdir(parents=True, exist_ok=True)
    sandbox = Path(os.path.realpath(options.execute_dir)) / f"dir_{time.monotonic_ns()}"
    sandbox.mkdir(mode=0o700)
    starter_ad = _starter_ad(options, sandbox, address)
    lease = job.get("JobLeaseDuration")
    link = ShadowLink(channel, claim_id=claim_text, global_job_id=gjid,
                      lease_s=float(lease) if isinstance(lease, int) else None,
                      starter_ad=starter_ad, starter_address=address)  # fmt: skip
    link.owner = str(job.get("User") or "")
    if options.peek_enabled is not None:  # condor_tail is refused at once, not retried
        link.peek_enabled = functools.partial(options.peek_enabled, job)
    ssh_policy(link, options, job)
    calls.attach(link)
    options.links.add(link)
    handed_over = False
    proxy: ChirpProxy | None = None
    streams = StreamedOutput.for_job(calls, job, sandbox, gjid)
    try:
        user = run_as_user(str(job.get("Owner", "")), options.run_as_fallback)
        uid, gid = user.pw_uid, user.pw_gid
        slot = nested_slot_ad(options.published_slot_ad) if options.published_slot_ad else {}
        await calls.register_starter_info(starter_ad | slot)
        await calls.get_sec_session_info()
        transfers = Transfers(calls, link, job_wire, address,
                              TransferTally(report=options.on_transferred))
        executable = str(job.get("Cmd", ""))

        urls = job_url_inputs(job, sandbox, (uid, gid), plugins=options.plugins,
                              timeout_s=options.plugin_timeout_s,
                              cgroup=options.plugin_cgroup,
                              job_plugin_mode=options.job_plugin_mode)  # fmt: skip

        async def receive(ch: Channel) -> TransferResult:
            return await download_sandbox(ch, sandbox, executable=executable, urls=urls,
                                          owner=(uid, gid) if os.geteuid() == 0 else None)

        transfer = wants_transfer(job, options.filesystem_domain or options.uid_domain)
        # Before the input arrives, as condor_starter's WriteAdFiles in its working
        # directory's setup: an input file of either name replaces them, as on condor.
        write_job_ads(sandbox, starter_job_ad(job_wire, job, sandbox, transfer, user.pw_dir),
                      options.published_slot_ad or starter_ad, gjid,
                      (uid, gid) if os.geteuid() == 0 else (os.getuid(), os.getgid()))
        got = await transfers.run(FILETRANS_UPLOAD, receive) if transfer else TransferResult()
        if not got.ok:
            log.warning("shadow_input_transfer_failed", job=gjid, code=got.hold_code,
                        subcode=got.hold_subcode)  # fmt: skip
            # As HTCondor's starter: a second for the shadow to finish its upload, the
            # failure files (stdout and stderr, missing here), then the error.
            await asyncio.sleep(1)

            async def failure_files(ch: Channel) -> TransferResult:
                return await upload_sandbox(
                    ch, sandbox, lambda: expand_outputs(sandbox, sent_std_files(job)))

            await send_output(transfers, failure_files, gjid)
            await calls.ulog(transfer_error(job, got))
            return
        # The shadow learns that its upload ended from its transfer process (pipe and
        # reaper), after the socket closed; it logs that end (040) when it handles our
        # next calls. HTCondor's starter is slower here by tens of milliseconds, so its
        # user logs have 040 before 001 (begin_execution): give the shadow that time.
        await asyncio.sleep(SHADOW_SETTLE_S if transfer else 0)
        provisioned = provisioned_resources(options.slot_ad) if options.slot_ad is not None \
            else {}  # fmt: skip
        await send_update(calls, provisioned | from_values({"_condor_JOBINFO_MAXINTERVAL": -1}),
                          options.on_update)  # fmt: skip
        if not urls.handed_over and os.geteuid() == 0:  # the directory only: no walk
            give_to_user(str(sandbox), uid, gid)
        proxy = await open_chirp_proxy(calls, job, gjid, sandbox, owner=(uid, gid),
                                       connected=lambda: not link.disconnected.is_set(),
                                       job_wire=job_wire, config=options.chirp)  # fmt: skip
        inputs = [n.split("/", 1)[0] for n in got.files]
        before = await sandbox_baseline(sandbox, gjid)
        stdin = job.get("In")
        stdin_name = os.path.basename(stdin) if isinstance(stdin, str) and stdin != "/dev/null" \
            and os.path.basename(stdin) in inputs else None  # fmt: skip
        log.info("shadow_job_starting", job=gjid, uid=uid)
        made = os.lstat(sandbox)
        state = Conversation(gjid, dict(job_wire), str(sandbox), inputs, before, transfer,
                             dict(starter_ad), link.lease_s, int(time.time()),
                             transfers.tally.received, sandbox_dev=made.st_dev,
                             sandbox_ino=made.st_ino, job_uid=uid, job_gid=gid)  # fmt: skip
        link.files = job_files(job, sandbox, transfer, uid)  # condor_tail may read them now
        link.file_transfer, link.proxy_name = transfer, proxy_name(job) if transfer else None
        link.proxy = proxy_target(str(sandbox), link.proxy_name)

        def started(pid: int) -> None:  # ssh may come in now, with the job's environment
            streams.started()
            link.shell = job_shell(options, user, sandbox, proc.environment(), pid,
                                   iwd=launch.workdir, interactive=is_interactive(job))  # fmt: skip
            if options.on_running is not None:
                options.on_running(dataclasses.replace(state, started=int(time.time())))

        try:
            await streams.open(uid, gid)  # the shadow's files of streamed Out/Err
            stdout, stderr = std_files(job)
            chirp_env = {"_CONDOR_CHIRP_CONFIG": str(proxy.config_path)} \
                if proxy is not None else {}  # fmt: skip
            env = job_env(job, sandbox, transfer) | chirp_env \
                | {"_CHIRP_DELAYED_UPDATE_PREFIX": options.chirp.prefix}  # fmt: skip
            launch = JobLaunch(job, job_argv(job, sandbox, got.files), sandbox,
                               env, (uid, gid), stdin_name,
                               stdout or os.devnull, stderr or os.devnull)  # fmt: skip
            launch = launch if transfer else shared_fs_launch(launch)
            proc = options.runner(dataclasses.replace(
                launch, stdout_name=streams.fifo("Out") or launch.stdout_name,
                stderr_name=streams.fifo("Err") or launch.stderr_name))
            done = await streams.alongside(_run_job(calls, proc, options, started), proc.kill,
                                           link.job_exited)  # fmt: skip
            if link.shell is not None:  # an interactive job ends with its last session
                done = link.shell.reported_exit(done)
        except JobHeldError as exc:
            await report_hold(calls, job, gjid, exc)
            return
        await conclude(calls, transfers, state, done, options.on_update,
                       usage=await proc.usage())
    except asyncio.CancelledError:
        handed_over = hand_over(calls, link, options, proxy, streams)
        raise
    finally:
        calls.turns.reopen()  # a quiesce's gate never outlives the conversation
        streams.close(handed_over)
        await close_conversation(options, link, proxy, sandbox, handed_over)
