"""Going on with a shadow conversation that a restarted execd inherited.

A restart in place (SIGUSR2) leaves the job running but closes the shadow's syscall
connection with the old process. The shadow treats that as any lost connection: it logs
the disconnect (022) and, within the job lease, asks the startd where the starter is
(CA_LOCATE_STARTER) and reconnects to it (CA_RECONNECT_JOB). The new execd has the
conversation's state from its store (`Conversation`, written once the job ran); it
goes on with the connection the old image handed over (execd/wire/handover.py), so
that the shadow notices nothing; where there is none (the old image was cut off in the
middle of a call, or this is no exec), it starts the conversation again *disconnected*:
its first call finds no connection and waits for the reconnect, as the call of a
conversation whose shadow went away does (shadow_link.py). Then updates, the exit, the
output transfer and job_exit follow as if nothing had happened. The lease is counted
from the restart (HTCondor's starter counts from its last contact with the shadow,
seconds earlier). A lease that runs out ends the conversation, and with it the job.

Why the connection is handed over rather than dropped: HTCondor 25's shadow stops its
file transfer server when it loses the starter's connection (remoteresource.cpp
disconnectClaimSock -> abortFileTransfer: the transfer key is unregistered) and never
registers it again when the *same* shadow reconnects (initFileTransfer runs once), so
after such a reconnect the output transfer is refused ("transkey is invalid"). A new
shadow (after its schedd restarted) starts a new server and is not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pwd
from pathlib import Path
from typing import Any

from execd.errors import RemoteProtocolError
from execd.log import get_logger
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.chirp_start import adopt_chirp_proxy
from execd.wire.conversation_record import Conversation
from execd.wire.encoding import Decoder, Encoder
from execd.wire.filetransfer import TransferTally
from execd.wire.handover import hand_over
from execd.wire.job_peek import job_files
from execd.wire.job_runner import JobHeldError, JobRunner, JobSetupError
from execd.wire.proxy_refresh import ProxyTarget, proxy_target
from execd.wire.shadow import (
    ShadowOptions,
    job_shell,
    ssh_policy,
    watch,
)
from execd.wire.shadow_end import close_conversation, conclude, report_hold
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_job import job_env, proxy_name, run_as_ids
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import MessageChannel
from execd.wire.shadow_transfers import Transfers, job_values
from execd.wire.ssh_sessions import is_interactive
from execd.wire.streamed_output import StreamedOutput

log = get_logger("wire")


class LostConnection:
    """The syscall connection that went with the old process: every call fails (and so
    waits for the shadow's reconnect)."""

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None:
        raise RemoteProtocolError("the shadow's connection closed when execd restarted")

    async def recv(self, timeout_s: float | None = None) -> bytes:
        raise RemoteProtocolError("the shadow's connection closed when execd restarted")

    def encoder(self) -> Encoder:
        return Encoder()

    def decoder(self, payload: bytes) -> Decoder:
        return Decoder(payload)


def resumed_proxy_target(state: Conversation, name: str | None,
                         job_uid: int | None) -> ProxyTarget | None:  # fmt: skip
    """Where the job's refreshed proxy goes after a restart: its sandbox as it is now,
    unresolved (a link in its place is no sandbox), only if it is still the directory
    recorded when the job started (device, inode, owned by the job's uid); a record made
    before those were kept: owned by the job's uid, never root. Else None: 487 is
    answered 0 and 500 gets no exchange."""
    target = proxy_target(state.sandbox, name)
    if target is None:
        return None
    if state.sandbox_ino is not None:
        recorded = (state.sandbox_dev, state.sandbox_ino, state.job_uid)
        same = (target.dev, target.ino, target.uid) == recorded
    else:
        same = target.uid == job_uid
    if not same or target.uid == 0:
        log.warning("sandbox_not_as_recorded", job=state.global_job_id, path=state.sandbox,
                    why="another directory, or not the job's: no proxy refresh reaches it")
        return None
    return target


async def resume_shadow(claim_id: str, state: Conversation, proc: JobRunner,
                        options: ShadowOptions,
                        channel: MessageChannel | None = None, *,
                        chirp_listener: dict[str, Any] | None = None,
                        streams: dict[str, Any] | None = None,
                        transfer: tuple[str, str] | None = None) -> None:  # fmt: skip
    """The rest of the conversation of `state`'s job (run by `proc`, adopted by the new
    daemon) to job_exit: on `channel`, the connection the old image handed over, else
    once the shadow has reconnected; the job's Chirp proxy again on `chirp_listener`,
    the listening socket the old image handed over, if any; its streamed output from
    `streams`, the FIFOs and positions it handed over; its output goes to `transfer`,
    the transfer socket and key a reconnect brought the old image (else the job ad's:
    the first shadow's, gone after its schedd restarted). Raises ProtocolError when
    the shadow does not come back within the job lease."""
    address = claim_id.split("#", 1)[0]
    channel = channel or LostConnection()
    calls = ShadowFileCalls(channel, timeout_s=options.syscall_timeout_s)  # and Chirp's
    link = ShadowLink(channel, claim_id=claim_id, global_job_id=state.global_job_id,
                      lease_s=state.lease_s, starter_ad=state.starter_ad,
                      starter_address=address)  # fmt: skip
    link.transfer = transfer
    job = job_values(state.job_wire)
    link.owner = str(job.get("User") or "")
    job_uid = state.job_uid
    if job_uid is None:  # a record from before they were kept: as the job was started
        with contextlib.suppress(JobSetupError):
            job_uid = run_as_ids(str(job.get("Owner", "")), options.run_as_fallback)[0]
    with contextlib.suppress(OSError):  # the job runs as its sandbox's owner
        link.files = job_files(job, Path(state.sandbox), state.transfer,
                               job_uid if job_uid is not None
                               else os.lstat(state.sandbox).st_uid)  # fmt: skip
    link.file_transfer = state.transfer
    link.proxy_name = proxy_name(job) if state.transfer else None
    link.proxy = resumed_proxy_target(state, link.proxy_name, job_uid)
    if options.peek_enabled is not None:
        link.peek_enabled = functools.partial(options.peek_enabled, job)
    ssh_policy(link, options, job)
    with contextlib.suppress(KeyError, OSError):  # condor_ssh_to_job: the job's user
        user = pwd.getpwuid(job_uid if job_uid is not None else os.lstat(state.sandbox).st_uid)
        sandbox = Path(state.sandbox)  # (its environment less the Chirp proxy's config)
        link.shell = job_shell(options, user, sandbox, job_env(job, sandbox, state.transfer),
                               0, interactive=is_interactive(job))  # fmt: skip
        link.shell.adopt_listed()  # an interactive job's sshds the earlier image started
    calls.attach(link)
    options.links.add(link)
    if options.claim_held is not None and not options.claim_held():
        link.claim_released()  # its RELEASE_CLAIM came before the link was there to find
    log.info("shadow_conversation_resumed", job=state.global_job_id, lease_s=state.lease_s,
             connection="kept" if not isinstance(channel, LostConnection) else "lost")
    handed_over = False
    proxy: ChirpProxy | None = None
    streamed = StreamedOutput.adopted(calls, streams, state.global_job_id)
    try:
        if chirp_listener is not None:
            proxy = await adopt_chirp_proxy(
                chirp_listener, calls, job, state.global_job_id,
                connected=lambda: not link.disconnected.is_set(), job_wire=state.job_wire,
                config=options.chirp)
        tally = TransferTally(state.input_bytes, report=options.on_transferred)
        transfers = Transfers(calls, link, state.job_wire, address, tally)
        if not isinstance(channel, LostConnection):  # the kept connection: the file
            await calls.get_sec_session_info()  # transfer session, as after a reconnect
        try:
            # its first call waits for the shadow
            done = await streamed.alongside(watch(calls, proc, options, 0), proc.kill,
                                            link.job_exited)  # fmt: skip
            if link.shell is not None:
                done = link.shell.reported_exit(done)
        except JobHeldError as exc:
            await report_hold(calls, job_values(state.job_wire), state.global_job_id, exc)
            return
        await conclude(calls, transfers, state, done, options.on_update,
                       usage=await proc.usage())
    except asyncio.CancelledError:  # restarting again?
        handed_over = hand_over(calls, link, options, proxy, streamed)
        raise
    finally:
        calls.turns.reopen()  # a quiesce's gate never outlives the conversation
        streamed.close(handed_over)
        await close_conversation(options, link, proxy, Path(state.sandbox), handed_over)
