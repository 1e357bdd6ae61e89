"""How the shadow's conversation ends: the job's exit, its output transfer and job_exit
(conclude), a hold reported as a critical RemoteErrorEvent (the shadow holds the job with
its code, as it does for HTCondor's starter), and what every conversation's end closes
and removes (its Chirp proxy, its link, the sandbox).

execd/wire/shadow.py runs the conversation up to the job's end and calls these;
execd/wire/shadow_resume.py calls them for a conversation a restarted daemon took over.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.starter.sandbox import RM_ERROR_KEPT, rm_argv, rm_error
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, from_values
from execd.wire.filetransfer import FILETRANS_DOWNLOAD, HOLD_UPLOAD_FILE_ERROR, TransferResult
from execd.wire.job_runner import JobExit, JobHeldError
from execd.wire.output_files import OutputItem, output_items, spooled_output_files
from execd.wire.sandbox_upload import upload_sandbox
from execd.wire.shadow_syscalls import (
    JOB_COREDUMPED,
    JOB_EXITED,
    JOB_SHOULD_REQUEUE,
    ShadowSyscalls,
    send_update,
)
from execd.wire.shadow_transfers import Transfers, job_values

if TYPE_CHECKING:
    from execd.wire.chirp_proxy import ChirpProxy
    from execd.wire.conversation_record import Conversation
    from execd.wire.shadow import ShadowOptions
    from execd.wire.shadow_link import ShadowLink

log = get_logger("wire")
ULOG_REMOTE_ERROR = 21


def remote_error(job: dict[str, object], message: str, code: int, subcode: int) -> WireAd:
    """A critical RemoteErrorEvent: the shadow holds the job with its code and subcode."""
    return from_values({
        "MyType": "RemoteErrorEvent", "EventTypeNumber": ULOG_REMOTE_ERROR,
        "Cluster": job.get("ClusterId", 0), "Proc": job.get("ProcId", 0), "Subproc": 0,
        "Daemon": "starter", "ErrorMsg": message,
        "HoldReasonCode": code, "HoldReasonSubCode": subcode,
    })  # fmt: skip


def transfer_error(job: dict[str, object], result: TransferResult) -> WireAd:
    return remote_error(job, f"Failed to transfer files: {result.hold_reason}",
                         result.hold_code, result.hold_subcode)  # fmt: skip


async def report_hold(calls: ShadowSyscalls, job: dict[str, object], gjid: str,
                      exc: JobHeldError) -> None:  # fmt: skip
    """Not started (code 6), or held by the starter (34/102) or the startd's policy (21)."""
    log.warning("shadow_job_held", job=gjid, reason=str(exc), code=exc.code)
    await calls.ulog(remote_error(job, str(exc), exc.code, exc.subcode))


async def conclude(calls: ShadowSyscalls, transfers: Transfers, state: Conversation,
                   done: JobExit, on_update: Callable[[WireAd], None] | None = None, *,
                   usage: Mapping[str, str] | None = None) -> None:  # fmt: skip
    """The job ended: the exit, the output (unless it was killed on request: then an
    ON_EXIT_OR_EVICT job's sandbox to be spooled, after a graceful kill), job_exit.
    The exit update and job_exit carry the job's last `usage` with the exit, as
    condor_starter's (publishUpdateAd): a job that ended before its first update still
    leaves its memory, disk and stdio mtimes in the job ad."""
    job = job_values(state.job_wire)
    gjid, address, sandbox = state.global_job_id, transfers.starter_address, Path(state.sandbox)
    exit_ad = {**(usage or {}), **done.exit_ad()}
    await calls.event_notification({"EventType": '"ActivationExecutionExit"'})
    await send_update(calls, {**exit_ad, "_condor_JOBINFO_MAXINTERVAL": "-1"}, on_update)
    # Vacated or removed: requeued, its output not delivered. A graceful eviction of an
    # ON_EXIT_OR_EVICT job first sends the sandbox to be spooled (final_transfer 0).
    spool = done.requested and done.graceful and \
        str(job.get("WhenToTransferOutput", "")).upper() == "ON_EXIT_OR_EVICT"
    final = {**exit_ad, "StarterIpAddr": f'"{address}"'}
    if state.transfer and (spool or not done.requested):

        def listed() -> list[OutputItem]:
            return output_items(sandbox, job, state.inputs, state.before)

        async def send(ch: Channel) -> TransferResult:
            return await upload_sandbox(ch, sandbox, listed, final=not done.requested)

        sent = await send_output(transfers, send, gjid)
        if not sent.ok:
            await calls.ulog(transfer_error(job, sent))
            return
        # in job_exit and to the startd, as condor_starter's job ad has it after a
        # transfer that succeeded (empty where only stdout and stderr went)
        spooled = from_values({"SpooledOutputFiles": spooled_output_files(sent.files)})
        final |= spooled
        if on_update is not None:
            on_update(spooled)
    transfers.tally.final()  # condor_starter's final update to its startd
    if done.requested:
        await calls.job_exit(done.wait_status, JOB_SHOULD_REQUEUE, final)
        log.info("shadow_job_evicted", job=gjid, status=done.wait_status, spooled=spool)
        return
    reason = JOB_COREDUMPED if done.core_dumped else JOB_EXITED
    await calls.job_exit(done.wait_status, reason, final)
    log.info("shadow_job_exited", job=gjid, status=done.wait_status)


async def send_output(transfers: Transfers, send: Callable[[Channel], Awaitable[TransferResult]],
                      gjid: str) -> TransferResult:  # fmt: skip
    """The output transfer; an error of ours in it (not the shadow's going away) is a
    hold (13) naming it, so the conversation still ends with a hold or a job_exit."""
    try:
        return await transfers.run(FILETRANS_DOWNLOAD, send)
    except ProtocolError:
        raise
    except Exception as exc:
        log.exception("shadow_output_transfer_failed", job=gjid)
        failed = TransferResult()
        failed.fail(HOLD_UPLOAD_FILE_ERROR, getattr(exc, "errno", None) or errno.EIO,
                    f"STARTER failed to send the output: {type(exc).__name__}: {exc}")
        return failed


async def close_conversation(options: ShadowOptions, link: ShadowLink,
                             proxy: ChirpProxy | None, sandbox: Path,
                             handed_over: bool) -> None:  # fmt: skip
    """What ends every conversation, its job done or not: its Chirp proxy closed, its
    ssh sessions ended, its link forgotten and closed, its sandbox removed
    (remove_sandbox)."""
    if proxy is not None:
        await proxy.close()
    options.links.remove(link)
    if link.shell is not None and not handed_over:  # (a restart in place keeps them)
        link.shell.end()  # its ssh sessions end with the conversation
    link.close()
    await remove_sandbox(sandbox, options, handed_over)


async def remove_sandbox(sandbox: Path, options: ShadowOptions, handed_over: bool) -> None:
    """After the conversation, unless the sandbox is kept or handed over (a restart).
    The starter's way (rm_argv, rm_error), as a subprocess of its own: conversations
    remove theirs concurrently and a hung removal holds only its own. Whatever writes
    into the sandbox from outside (options.before_removal) has stopped first."""
    if options.before_removal is not None:
        await options.before_removal()
    if options.keep_sandbox or handed_over:
        return
    try:
        rm = await asyncio.create_subprocess_exec(
            *rm_argv(sandbox), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    except OSError as exc:
        error: str | None = f"rm could not run ({exc})"
    else:
        assert rm.stderr is not None
        try:  # the start of it, whatever size of pieces rm writes it in
            kept = await rm.stderr.readexactly(RM_ERROR_KEPT)
        except asyncio.IncompleteReadError as short:  # all of it, shorter
            kept = short.partial
        while await rm.stderr.read(65536):  # a huge tree's errors: drained, never kept
            pass
        error = rm_error(kept, await rm.wait())
    if error is not None:
        log.warning("shadow_sandbox_not_removed", sandbox=str(sandbox), error=error)
