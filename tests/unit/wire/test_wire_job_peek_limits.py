"""What a job owner's session and its STARTER_PEEK requests may not do: reach any other
command, have an expression evaluated, make root open what lies outside the sandbox,
stall the daemon on the job's files, or pile up. Over real connections to execd's
command server, as test_wire_job_peek; the client side is its DCStarter::peek."""

from __future__ import annotations

import asyncio
import ctypes
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from structlog.testing import capture_logs
from test_wire_job_peek import CLAIM, OUT, Idle, owner_claim, owner_session, peek, read_reply
from wire_pairs import channel_pair

from execd.daemon.pool_commands import CLAIM_COMMANDS, PoolCommands
from execd.errors import ProtocolError
from execd.wire import job_peek
from execd.wire.authz_policy import AuthzPolicy
from execd.wire.channel import Channel
from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import encode_ad
from execd.wire.commands import COMMAND_PERMISSION, Command
from execd.wire.job_owner_session import SESSIONS_PER_JOB, OwnerSessions
from execd.wire.job_peek import JobFiles, job_files, open_in_sandbox
from execd.wire.security import ClientSecurity, claim_client_session, connect, start_command
from execd.wire.server import CommandServer, Peer, ServerSecurity
from execd.wire.shadow import ShadowOptions, serve_shadow
from execd.wire.shadow_link import ShadowLink, ShadowLinks
from execd.wire.shadow_syscalls import GET_JOB_INFO
from execd.wire.sinful import Sinful, parse_sinful

ADMIN = "condor@attacker.example"  # matches the default administrators and schedulers
JOB = {"User": ADMIN, "Out": "out.txt", "Err": "err.txt", "StreamOut": False,
       "StreamErr": False, "TransferOutput": "progress.txt, subdir, locked.txt, pipe"}
ADMIN_COMMANDS = {c for c, level in COMMAND_PERMISSION.items() if level == "ADMINISTRATOR"}
OTHER_COMMANDS = sorted(CLAIM_COMMANDS | ADMIN_COMMANDS
                        | {Command.QUERY_STARTD_ADS, Command.DC_CONFIG_VAL})  # fmt: skip


def sandbox(path: Path) -> Path:
    (path / "_condor_stdout").write_text(OUT)
    (path / "_condor_stderr").write_text("err line\n")
    (path / "progress.txt").write_text("named 1\n")
    (path / "subdir").mkdir()
    (path / "locked.txt").write_text("not for the job's user\n")
    (path / "locked.txt").chmod(0o600)  # the file's owner only: not the job's user
    os.mkfifo(path / "pipe")
    return path


def running_job(links: ShadowLinks, files: JobFiles | None) -> ShadowLink:
    link = ShadowLink(Idle(), claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=60,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    link.owner, link.files = ADMIN, files
    links.add(link)
    return link


def serve(links: ShadowLinks, ran: list[int]) -> CommandServer:
    """The pool's authorization with its default identities; every other command's
    handler only records that it ran."""
    security = ServerSecurity(domain="test", timeout_s=5)
    config = SimpleNamespace(authz=AuthzPolicy.from_config(
        {"EXECD_POOL_SCHEDULERS": "condor@*", "EXECD_POOL_ADMINISTRATORS": "root@* condor@*"}.get))
    commands = PoolCommands(cast(Any, SimpleNamespace(config=config, daemon=None,
                                                      security=security)))  # fmt: skip
    commands.owners = OwnerSessions(security, links)
    security.authorize = commands.authorize
    security.add_claim_session(claim_session(CLAIM))

    async def record(channel: Channel, command: int, peer: Peer) -> None:
        ran.append(command)

    handlers: dict[int, Any] = {command: record for command in OTHER_COMMANDS}
    for command in (Command.CREATE_JOB_OWNER_SEC_SESSION, Command.STARTER_PEEK,
                    Command.START_SSHD):  # fmt: skip
        handlers[command] = commands.owner_command
    return CommandServer(handlers, security)


async def refused(where: Sinful, command: int, session: Any) -> bool:
    channel = await connect(where, timeout_s=5)
    try:
        await start_command(channel, where, command, ClientSecurity(timeout_s=5),
                            session=session)  # fmt: skip
        await channel.send(channel.encoder().put_int(0).payload())
        await channel.recv()
    except ProtocolError:
        return True
    finally:
        await channel.close()
    return False


def test_an_owner_session_runs_only_the_owner_commands_whatever_user_it_names(
        tmp_path: Path) -> None:  # fmt: skip
    links, ran = ShadowLinks(), []
    running_job(links, job_files(JOB, sandbox(tmp_path), True, os.getuid()))
    server = serve(links, ran)
    seen: dict[str, Any] = {}

    async def run() -> None:
        await server.start()
        where = parse_sinful(server.address)
        try:
            owner = await owner_claim(where)
            assert owner is not None
            session = owner_session(owner, where)
            seen["refused"] = [c for c in OTHER_COMMANDS if await refused(where, c, session)]
            seen["ran"] = list(ran)
            seen["peek"] = await peek(where, session, {"Err": True, "MaxTransferBytes": 9})
            # the schedd's claim session still reaches a claim command through the same hook
            await refused(where, Command.RELEASE_CLAIM,
                          claim_client_session(claim_session(CLAIM), where))  # fmt: skip
        finally:
            await server.close()

    with capture_logs() as events:
        asyncio.run(run())
    assert seen["refused"] == OTHER_COMMANDS and seen["ran"] == []
    assert seen["peek"][1] == [b"err line\n"]
    assert ran == [Command.RELEASE_CLAIM]
    why = {e["command"]: e["why"] for e in events if e["event"] == "pool_command_refused"}
    assert why == dict.fromkeys(OTHER_COMMANDS,
                                "a job owner's session serves only its owner commands")


def served(wire: dict[str, str], files: JobFiles) -> tuple[dict[str, Any], list[bytes]]:
    """One STARTER_PEEK request (attribute -> expression text) answered by serve_peek
    over a socket pair."""

    async def run() -> tuple[dict[str, Any], list[bytes]]:
        ours, theirs = await channel_pair()
        server = asyncio.create_task(job_peek.serve_peek(
            ours, files, finished=False, enabled=lambda: True, job="vm#1.0#1"))
        try:
            await theirs.send(encode_ad(theirs.encoder(), wire).payload())
            return await read_reply(theirs)
        finally:
            await server
            await ours.close()
            await theirs.close()

    return asyncio.run(run())


def test_a_request_is_read_as_literals_and_only_its_own_attributes(tmp_path: Path) -> None:
    files = job_files(JOB, sandbox(tmp_path), True, os.getuid())
    bomb = {"A0": '"x"'} | {f"A{i}": f"strcat(A{i - 1}, A{i - 1})" for i in range(1, 23)}
    progress = '"progress.txt"'
    replies = {name: served(wire, files) for name, wire in {
        "bomb": {"Err": "true", "MaxTransferBytes": "1024", **bomb},  # 4 MiB if evaluated
        "expressions": {"Out": "true && true", "Err": "true", "MaxTransferBytes": "4 + 4"},
        "not-a-list": {"Err": "true", "TransferFiles": progress},
        "a-name-expression": {"TransferFiles": '{ strcat("progress", ".txt") }'},
        "repeated": {"TransferFiles": "{ " + ", ".join([progress] * 3) + " }",
                     "MaxTransferBytes": "1024"},
        "flood": {"TransferFiles": "{ " + ", ".join([progress] * 200_000) + " }"},
    }.items()}  # fmt: skip
    assert replies["bomb"] == ({"Result": True, "TransferFiles": [1], "TransferOffsets": [0],
                                "count": 1}, [b"err line\n"])  # fmt: skip
    # an expression is never evaluated: Out is not "true", MaxTransferBytes not 8
    assert replies["expressions"][1] == [b"err line\n"]
    assert replies["not-a-list"][1] == [b"err line\n"]  # ignored, as condor_starter does
    assert replies["a-name-expression"][0]["ErrorString"] == "Could not evaluate transfer list."
    assert replies["repeated"] == ({"Result": True, "TransferFiles": ["progress.txt"],
                                    "TransferOffsets": [0], "count": 1}, [b"named 1\n"])
    assert replies["flood"][0]["Result"] is False
    assert "TransferFiles list is longer than the job's files could need" in \
        replies["flood"][0]["ErrorString"]  # fmt: skip


def test_a_directory_is_sent_empty_and_counted_an_unreadable_or_odd_file_not(
        tmp_path: Path) -> None:  # fmt: skip
    """put_file sends a directory as an empty file and condor_starter counts it; a file
    the job's user may not read, or a FIFO, is an empty dummy that is not counted."""
    box = sandbox(tmp_path)
    files = job_files(JOB, box, True, os.getuid() + 1)  # the files' owner is not the job's user
    (box / "progress.txt").chmod(0o644)
    names = ["progress.txt", "subdir", "locked.txt", "pipe"]  # the directory's size counts
    # in MaxTransferBytes, as condor_starter plans it: progress.txt first
    reply, got = served({"TransferFiles": "{ " + ", ".join(f'"{n}"' for n in names) + " }",
                         "MaxTransferBytes": "1024"}, files)  # fmt: skip
    assert reply["TransferFiles"] == names
    assert got == [b"named 1\n", b"", b"", b""]
    assert reply["count"] == 2  # progress.txt and the directory


IN_OPEN = 0x20


def test_root_opens_nothing_outside_the_sandbox_through_a_swapped_directory(
        tmp_path: Path) -> None:  # fmt: skip
    """A directory of the sandbox swapped for a symlink after its name was resolved:
    the file it leads to outside is not even opened (no inotify IN_OPEN)."""
    (tmp_path / "box").mkdir()
    (tmp_path / "outside").mkdir()
    box, outside = sandbox(tmp_path / "box"), tmp_path / "outside"
    (outside / "secret").write_text("not the job's\n")
    (box / "subdir").rmdir()
    (box / "subdir").symlink_to(outside)
    files = job_files(JOB, box, True, os.getuid())
    libc = ctypes.CDLL(None, use_errno=True)
    watch = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert watch >= 0
    try:
        assert libc.inotify_add_watch(watch, str(outside / "secret").encode(), IN_OPEN) >= 0
        assert open_in_sandbox(str(box / "subdir" / "secret"), files) is None
        with pytest.raises(BlockingIOError):
            os.read(watch, 4096)
        opened = open_in_sandbox(str(box / "progress.txt"), files)  # inside: read as before
        assert opened is not None and opened.fd is not None
        assert os.read(opened.fd, 100) == b"named 1\n"
        opened.close()
    finally:
        os.close(watch)


def test_files_that_do_not_answer_leave_the_daemon_serving(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The peek's file work runs on its own thread with a time limit: while it hangs
    (held here), the loop answers other requests, and the peek is told to retry."""
    files = job_files(JOB, sandbox(tmp_path), True, os.getuid())
    monkeypatch.setattr(job_peek, "PEEK_IO_TIMEOUT_S", 2.0)
    hung, release = threading.Event(), threading.Event()

    def hang() -> None:  # what a read on a hung NFS mount does to the thread
        hung.set()
        release.wait(30)

    async def run() -> tuple[dict[str, Any], list[bytes]]:
        stuck = asyncio.ensure_future(job_peek.PEEK_IO.run(30, hang))
        await asyncio.to_thread(hung.wait, 5)
        try:
            ours, theirs = await channel_pair()
            server = asyncio.create_task(job_peek.serve_peek(
                ours, files, finished=False, enabled=lambda: True, job="vm#1.0#1"))
            await theirs.send(encode_ad(theirs.encoder(), {"Err": "true"}).payload())
            reply = asyncio.create_task(read_reply(theirs))
            one, other = await channel_pair()  # meanwhile the loop serves other connections
            await one.send(b"ping")
            assert await other.recv() == b"ping" and not reply.done()
            await one.close()
            await other.close()
            await server
            await ours.close()
            await theirs.close()
            return reply.result()
        finally:
            release.set()
            await stuck

    reply, got = asyncio.run(run())
    assert reply == {"Result": False, "Retry": True, "ErrorString":
                     "Retrying request, because the job's files did not answer within 2 s."}
    assert got == []


def test_a_jobs_sessions_have_one_end_hook_and_the_one_in_use_outlives_newer_ones() -> None:
    security = ServerSecurity(domain="test")
    owners = OwnerSessions(security, ShadowLinks())
    link = running_job(ShadowLinks(), None)
    follow = owners.create(link).split("#", 1)[0]  # a `condor_tail -f`, asking on and on
    made = []
    for _ in range(3 * SESSIONS_PER_JOB):
        made.append(owners.create(link).split("#", 1)[0])
        assert owners.holder(security.sessions[follow].peer) is not None
    assert len(link.on_close) == 1
    assert set(security.sessions) == {follow, *made[-(SESSIONS_PER_JOB - 1):]}
    link.close()
    assert len(owners) == 0 and not security.sessions


def test_enable_peek_job_holds_from_the_jobs_first_call(tmp_path: Path) -> None:
    """condor_tail before the input transfer is refused at once (condor_starter reads
    ENABLE_PEEK_JOB first), not told to retry until the job runs."""
    links = ShadowLinks()
    options = ShadowOptions(execute_dir=tmp_path, links=links, keep_sandbox=True,
                            peek_enabled=lambda job: job.get("User") != ADMIN)  # fmt: skip
    seen: dict[str, Any] = {}

    async def run() -> None:
        ours, theirs = await channel_pair()
        starter = asyncio.create_task(serve_shadow(ours, CLAIM, {}, options=options))
        try:
            dec = theirs.decoder(await theirs.recv())
            assert dec.get_int() == GET_JOB_INFO
            job = {"User": f'"{ADMIN}"', "GlobalJobId": '"vm#1.0#1"', "Cmd": '"/bin/true"'}
            await theirs.send(encode_ad(theirs.encoder().put_int(0), job).payload())
            await theirs.recv()  # its next call: the job is not set up yet
            link = links.by_claim(CLAIM)
            assert link is not None and link.files is None
            seen["enabled"] = link.peek_enabled()
        finally:
            await theirs.close()
            with pytest.raises(ProtocolError):
                await starter
            await ours.close()

    asyncio.run(run())
    assert seen["enabled"] is False
