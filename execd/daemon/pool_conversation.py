"""The starter side of a pool claim: the shadow's conversation, served on ACTIVATE_CLAIM
and gone on with after a restart in place.

What a restart needs is in the store (`pool_claims`): each claim made through the pool
with its schedd and lease (the ALIVEs go on), and, once its job runs, the conversation's
state (execd.wire.conversation_record.Conversation: the job ad, sandbox, what the input
brought; no secret, the claim id stays in `claims`), and, written as the old image
stops, the shadow's connection handed over (execd.wire.handover; a secret) with the
job's Chirp listening socket and cookie (execd.wire.chirp_proxy; a secret) and a
reconnected shadow's transfer socket and key (a secret). The new
daemon accepts the claims' security sessions again (the shadow's CA_CMDs resume them),
listens on the address the claim ids name (execd.daemon.pool binds the remembered port),
and goes on with each conversation whose job it adopted (execd.wire.shadow_resume): on
the kept connection, so that the shadow notices nothing, or else once the shadow
reconnects, within the job lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import pwd
from pathlib import Path
from typing import TYPE_CHECKING, Any

from execd import log
from execd.cgroups.tree import CgroupTree, JobCgroup
from execd.claims.ids import ClaimId
from execd.classads import evaluate, new_ad
from execd.daemon.pool_job import PoolJob
from execd.daemon.update_ad import SandboxIdentity
from execd.errors import CgroupError, ExecdError, ProtocolError
from execd.wire.channel import Channel
from execd.wire.chirp_config import ChirpConfig
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.classad_codec import WireAd
from execd.wire.conversation_record import Conversation
from execd.wire.handover import adopt_connection, export_connection, release_connection
from execd.wire.shadow import SYSCALL_TIMEOUT_S, ShadowOptions
from execd.wire.shadow import serve_shadow as run_conversation
from execd.wire.shadow_resume import resume_shadow
from execd.wire.shadow_syscalls import MessageChannel
from execd.wire.sinful import parse_sinful
from execd.wire.stream_output import release_streams
from execd.wire.transfer_plugins import PLUGIN_LIFETIME_S

if TYPE_CHECKING:
    from execd.config.settings import Settings
    from execd.daemon.job import Job
    from execd.daemon.pool import PoolMember

logger = log.get_logger("pool")
CHIRP_LISTENER = "chirp_listener"  # in the handed-over record: the job's Chirp listener
STREAMS = "streams"  # and its streamed output (execd.wire.stream_output)
TRANSFER = "transfer"  # and a reconnected shadow's transfer socket and key (a secret)


def published_slot_ad(member: PoolMember, slot: str) -> WireAd | None:
    """The slot's public ad as the collector has it (its claim's attributes included):
    taken as the claim is activated, before the slot goes Busy, it is what condor_startd
    hands the starter it spawns, which nests it in register_starter_info as SlotAd. None
    for a slot with neither a claim nor an offer."""
    claimed = any(name == slot for name, _ in member.daemon.jobs.claims.values())
    if not claimed and slot not in member.offers:
        return None
    return member.public_ad(slot)


def shadow_options(member: PoolMember, claim: ClaimId, job: PoolJob, handed_over: list[bool],
                   published: WireAd | None = None) -> ShadowOptions:  # fmt: skip
    """How execd's starter side serves the shadow of `claim`'s job (run by `job`);
    `handed_over` says, once it ended, whether the conversation went to the next image;
    `published` is the slot's ad for the shadow (published_slot_ad)."""
    daemon = member.daemon
    store = daemon.jobs.store
    slot = job.job.slot if job.job is not None else ""
    ad = member.slot_ads().get(slot)

    def on_running(state: Conversation) -> None:
        store.set_conversation(claim.session_id, state.to_json())

    def handover(channel: MessageChannel | None, proxy: ChirpProxy | None,
                 streams: dict[str, Any] | None,
                 transfer: tuple[str, str] | None) -> bool:  # fmt: skip
        """Restarting in place: the next image goes on (with the connection, if the
        conversation was between two calls and the job runs; with the job's Chirp
        listener, if it has one; with its streamed output's FIFOs; with the transfer
        endpoint of a shadow that reconnected)."""
        if daemon.stopping != "restart":
            return False
        connection = export_connection(channel) if isinstance(channel, Channel) else None
        listener = proxy.export_listener() if proxy is not None else None
        record = handover_record(connection, listener, streams, transfer)
        store.set_connection(claim.session_id, record)
        logger.info("shadow_conversation_handed_over", slot=slot,
                    connection="kept" if record is not None and "fd" in record
                    else "dropped", chirp=listener is not None)  # fmt: skip
        handed_over.append(True)
        return True

    def transferred(received: int, sent: int) -> None:  # the starter's final update
        daemon.startd_stats.transfers.add(received, sent)
        job.note_transferred(received, sent)

    return ShadowOptions(
        execute_dir=daemon.paths.execute,
        slot_name=str(ad["Name"]) if ad is not None else slot,
        uid_domain=member.config.domain,
        update_interval_s=float(daemon.settings.get_int("STARTER_UPDATE_INTERVAL") or 300),
        initial_update_s=float(daemon.settings.get_int("STARTER_INITIAL_UPDATE_INTERVAL") or 8),
        syscall_timeout_s=syscall_timeout_s(daemon.settings),
        runner=job.runner, on_running=on_running, handover=handover, slot_ad=ad,
        published_slot_ad=published,
        on_transferred=transferred, on_update=job.note_update,
        before_removal=job.close_update_ad,
        peek_enabled=lambda job_values: peek_enabled(daemon.settings, ad, job_values),
        ssh_enabled=lambda job_values: peek_enabled(daemon.settings, ad, job_values,
                                                    "ENABLE_SSH_TO_JOB"),
        sshd_cgroup=lambda: sshd_cgroup(member, slot),
        sshds_file=lambda: sshds_file(job),
        suspended=lambda: job.job is not None and job.job.suspended is not None,
        claim_held=lambda: claim.full() in member.claims  # (restore tracks it first)
        and claim.full() not in member.closed_by_schedd,
        chirp=ChirpConfig.from_settings(daemon.settings),
        plugins=member.lookups.plugins if daemon.settings.get_bool("ENABLE_URL_TRANSFERS", True)
        else None,
        plugin_timeout_s=float(daemon.settings.get_int("MAX_FILE_TRANSFER_PLUGIN_LIFETIME")
                               or PLUGIN_LIFETIME_S),
        plugin_cgroup=plugin_cgroup(daemon.jobs.tree, slot),
        job_plugin_mode=lambda job_values: job_plugin_mode(daemon.settings, ad, job_values),
    )  # fmt: skip


def syscall_timeout_s(settings: Settings) -> float:
    """STARTER_UPLOAD_TIMEOUT: how long a shadow call waits for its answer (300 s; 0 or
    less, or unset: 300, where condor's socket would wait forever)."""
    value = settings.get_int("STARTER_UPLOAD_TIMEOUT") or 0
    return float(value) if value > 0 else SYSCALL_TIMEOUT_S


def job_plugin_mode(settings: Settings, slot_ad: Any, job: dict[str, object]) -> int:
    """STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS as condor_starter's param_integer
    reads it: an expression over the slot's ad (MY) and the job's (TARGET); unset, not
    a number, or <= 0: 0 (allow); 2: ignore the job's plugins; anything else: 1 (fail)."""
    name = "STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS"
    if not (settings.get_str(name) or "").strip():
        return 0
    try:
        value = evaluate(settings.get_expr(name), slot_ad, new_ad(job))
    except ExecdError:  # not an expression: condor_starter's param_integer fails, allows
        return 0
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int | float) or value <= 0:
        return 0
    return 2 if value == 2 else 1


def plugin_cgroup(tree: CgroupTree | None, slot: str) -> JobCgroup | None:
    """Where a slot's transfer plugins run: each run in `<slot>.plugins.<n>.slice`
    next to the job's (plugin_runner.run_cgroup: made and removed around the run; one
    left by a crash is an orphan recovery removes). None without a delegated cgroup
    tree."""
    if tree is None or not slot:
        return None
    try:
        return tree.job(f"{slot}.plugins")
    except CgroupError:
        return None


def peek_enabled(settings: Settings, slot_ad: Any, job: dict[str, object],
                 knob: str = "ENABLE_PEEK_JOB") -> bool:  # fmt: skip
    """ENABLE_PEEK_JOB (or ENABLE_SSH_TO_JOB) as condor_starter's param_boolean reads
    it: the expression over the slot's ad (MY) and the job's (TARGET); a value that is
    not a boolean or a number counts as the default, true."""
    value = evaluate(settings.get_expr(knob) or "true", slot_ad, new_ad(job))
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    return True


def sshd_cgroup(member: PoolMember, slot: str) -> Path | None:
    """Where the job's sshd runs: `<slot>.slice/sshd`, next to the job's own leaf (so
    the job's limits, freeze and kill cover it); None without execd's cgroup tree."""
    tree = member.daemon.jobs.tree
    if tree is None or not slot:
        return None
    try:
        return tree.job(slot).sshd
    except CgroupError:
        return None


def sshds_file(job: PoolJob) -> Path | None:
    """Where the job's interactive sessions list their sshds for its starter (its
    spec's ssh_sessions_file, execd.starter.sshd_list); None: no starter (yet)."""
    handle = job.job.handle if job.job is not None else None
    listed = handle.spec.ssh_sessions_file if handle is not None else None
    return Path(listed) if listed else None


def _ended(member: PoolMember, claim: ClaimId, handed_over: list[bool]) -> None:
    """The conversation is over, unless it went to the daemon's next image."""
    if not handed_over:
        member.daemon.jobs.store.set_conversation(claim.session_id, None)


async def serve_shadow(member: PoolMember, channel: Channel, claim: ClaimId,
                       job_ad: dict[str, Any], job: PoolJob, *,
                       published: WireAd | None = None) -> None:  # fmt: skip
    """The shadow's conversation on the activation socket (execd.wire.shadow), its job
    run by execd's starter through `job`; `published`: the slot's ad as activated.

    Called after ACTIVATE_CLAIM was accepted (the slot is Claimed/Busy; the starter
    waits for the input transfer). Returns when the shadow has the job's exit, or the
    hold; raises ProtocolError if the shadow goes away."""
    handed_over: list[bool] = []
    options = shadow_options(member, claim, job, handed_over, published)
    try:
        await run_conversation(channel, claim, job_ad, options=options)
    finally:
        _ended(member, claim, handed_over)


def restore(member: PoolMember) -> list[asyncio.Task[None]]:
    """After a restart: the claims made through the pool are served (their sessions),
    kept alive (ALIVE), and their jobs' conversations go on; returns those tasks."""
    daemon = member.daemon
    store = daemon.jobs.store
    by_session = {claim.session_id: (slot, claim) for slot, claim in daemon.jobs.claims.values()}
    tasks = []
    for held in store.pool_claims():
        session, connection = held.session_id, held.connection
        if connection is not None:  # valid for this image only: taken now or never
            store.set_connection(session, None)
        connection, listener, streams, transfer = split_handover(connection)
        if session not in by_session:  # the claim did not come back
            store.remove_pool_claim(session)
            _release(connection, listener, streams)
            continue
        slot, claim = by_session[session]
        member.accept_claim(claim)
        member.track(claim, slot, held.schedd, held.lease_s)
        logger.info("pool_claim_restored", slot=slot, claim=str(claim), schedd=held.schedd)
        with contextlib.suppress(ExecdError):  # its ClientMachine: the schedd's host
            peer = parse_sinful(held.schedd).host_port
            tasks.append(asyncio.get_running_loop().create_task(
                member.job_attrs.note_client(claim, peer)))  # fmt: skip
        job = _job_of(member, claim)
        conversation = None
        try:
            if held.conversation is not None and job is not None:
                conversation = Conversation.from_json(held.conversation)
        except ValueError as exc:
            logger.error("shadow_conversation_not_restored", slot=slot, error=str(exc))
        if conversation is None or job is None:
            if job is not None:  # nobody goes on with it: its record, now or at its end
                job.history_deferred = False
                if job.done.is_set():
                    daemon.jobs.write_history(job)
            store.set_conversation(session, None)
            _release(connection, listener, streams)
            continue
        tasks.append(asyncio.get_running_loop().create_task(
            _resume(member, claim, conversation, job, connection, listener=listener,
                    streams=streams, transfer=transfer)))  # fmt: skip
    return tasks


Handed = dict[str, Any] | None


def handover_record(connection: Handed, listener: Handed, streams: Handed,
                    transfer: tuple[str, str] | None) -> Handed:  # fmt: skip
    """What the old image hands over, as kept in the store (root's, never logged)."""
    record = dict(connection or {})
    for name, value in ((CHIRP_LISTENER, listener), (STREAMS, streams)):
        if value is not None:
            record[name] = value
    if transfer is not None:
        record[TRANSFER] = list(transfer)
    return record or None


def split_handover(record: Handed) -> tuple[Handed, Handed, Handed, tuple[str, str] | None]:
    """What the old image handed over: the shadow's connection, the Chirp listener, the
    streamed output's FIFOs, a reconnected shadow's transfer socket and key."""
    if record is None:
        return None, None, None, None
    record = dict(record)
    listener, streams = record.pop(CHIRP_LISTENER, None), record.pop(STREAMS, None)
    transfer = record.pop(TRANSFER, None)
    endpoint = (str(transfer[0]), str(transfer[1])) \
        if isinstance(transfer, list) and len(transfer) == 2 else None  # fmt: skip
    return (record or None), (listener if isinstance(listener, dict) else None), \
        (streams if isinstance(streams, dict) else None), endpoint  # fmt: skip


def _release(connection: Handed, listener: Handed, streams: Handed) -> None:
    """Inherited descriptors nobody goes on with: closed."""
    for record in (connection, listener):
        if record is not None:
            release_connection(record)
    release_streams(streams)


def _gid_of(uid: int) -> int:
    """The primary group of the job's user (the sandbox's group, else the uid's), for
    a record made before the job's group was kept."""
    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return uid


def recorded_sandbox(state: Conversation) -> SandboxIdentity | None:
    """The sandbox as the conversation recorded it at the job's start, whose
    `.update.ad` goes on being written; None for a record older than that. The job's
    group as recorded; a record made before it was: its user's primary group."""
    if state.sandbox_dev is None or state.sandbox_ino is None or state.job_uid is None:
        return None
    gid = state.job_gid if state.job_gid is not None else _gid_of(state.job_uid)
    return SandboxIdentity(state.sandbox, state.sandbox_dev, state.sandbox_ino,
                           state.job_uid, gid)  # fmt: skip


def _job_of(member: PoolMember, claim: ClaimId) -> Job | None:
    """The claim's latest job (running, or ended while execd restarted)."""
    jobs = [job for job in member.daemon.jobs.jobs.values()
            if job.claim.session_id == claim.session_id]  # fmt: skip
    return max(jobs, key=lambda job: job.started, default=None)


async def _resume(member: PoolMember, claim: ClaimId, state: Conversation, job: Job,
                  connection: Handed, *, listener: Handed, streams: Handed,
                  transfer: tuple[str, str] | None) -> None:
    runner = PoolJob.adopted(member.daemon.jobs, claim.full(), job, state.started,
                             Path(state.sandbox) if state.transfer else None,
                             wire=state.job_wire, identity=recorded_sandbox(state))  # fmt: skip
    handed_over: list[bool] = []
    options = shadow_options(member, claim, runner, handed_over)
    try:
        try:
            channel = None if connection is None else \
                await adopt_connection(connection, timeout_s=member.security.timeout_s)  # fmt: skip
        except BaseException:
            release_streams(streams)  # resume_shadow, which would adopt them, never runs
            raise
        await resume_shadow(claim.full(), state, runner, options, channel,
                            chirp_listener=listener, streams=streams, transfer=transfer)
    except (ProtocolError, ExecdError, OSError) as exc:
        logger.warning("shadow_conversation_ended", slot=job.slot, job=job.job_id,
                       why=str(exc))  # fmt: skip
    except Exception as exc:  # a bug here is logged; the daemon and other jobs go on
        logger.exception("shadow_conversation_failed", slot=job.slot, job=job.job_id,
                         error=str(exc))  # fmt: skip
    finally:
        runner.close()
        _ended(member, claim, handed_over)
