"""condor_tail's path into a running job, over real connections to execd's command
server: the schedd's CREATE_JOB_OWNER_SEC_SESSION on the claim's session, then the
tool's STARTER_PEEK (and START_SSHD) on the job owner's session it answered. The
client side here reads what DCStarter::peek reads (dc_starter.cpp), message by message.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from execd.classads import new_ad
from execd.config.loader import load_config, parse_config_text
from execd.config.settings import load_settings
from execd.daemon.pool_commands import PoolCommands
from execd.daemon.pool_conversation import peek_enabled
from execd.errors import ProtocolError
from execd.wire.authz_policy import AuthzPolicy
from execd.wire.channel import Channel
from execd.wire.claim_session import ClaimSession, claim_session
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad
from execd.wire.commands import Command
from execd.wire.crypto import hkdf_key
from execd.wire.job_owner_session import (
    DUMMY_OWNER,
    SESSIONS_PER_JOB,
    OwnerSessions,
)
from execd.wire.job_peek import job_files
from execd.wire.security import ClientSecurity, claim_client_session, connect, start_command
from execd.wire.server import CommandServer, ServerSecurity
from execd.wire.shadow_link import ShadowLink, ShadowLinks
from execd.wire.shadow_syscalls import MessageChannel
from execd.wire.sinful import parse_sinful

SECRET = "c" * 64
CLAIM = f"<127.0.0.1:1?addrs=127.0.0.1-1>#1795423816#7#[Encryption=\"YES\";]{SECRET}"
OWNER = "alice@pool.example"
JOB = {"User": OWNER, "Out": "out.txt", "Err": "err.txt", "StreamOut": False,
       "StreamErr": False, "TransferOutput": "progress.txt, empty.txt,escape.txt,gone"}
OUT = "".join(f"line {i}\n" for i in range(200))


class Idle:  # the shadow's side of the link: no call is made in these tests
    def encoder(self) -> Any: ...
    def decoder(self, payload: bytes) -> Any: ...
    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None: ...
    async def recv(self, timeout_s: float | None = None) -> bytes: return b""


def sandbox_with_files(path: Path) -> Path:
    (path / "_condor_stdout").write_text(OUT)
    (path / "_condor_stderr").write_text("err line\n")
    (path / "progress.txt").write_text("named 1\nnamed 2\n")
    (path / "empty.txt").write_text("")
    (path / "escape.txt").symlink_to("/etc/passwd")
    return path


async def owner_claim(where: Any, claim: str = CLAIM) -> str | None:
    """The schedd's side (on the claim's session, naming `claim`): the owner's claim id,
    None when the starter hangs up."""
    channel = await connect(where, timeout_s=5)
    try:
        await start_command(channel, where, Command.CREATE_JOB_OWNER_SEC_SESSION,
                            ClientSecurity(timeout_s=5),
                            session=claim_client_session(claim_session(CLAIM), where))  # fmt: skip
        ad = from_values({"ClaimId": claim, "SessionInfo": '[Encryption="YES";Integrity="YES";]'})
        await channel.send(encode_ad(channel.encoder(), ad).payload())
        reply = to_classad(decode_ad(channel.decoder(await channel.recv()), "reply"))
        assert reply["Result"] is True and "25.0.0" in reply["Version"]
        assert reply["StarterIpAddr"] == "<127.0.0.1:1>"
        return str(reply["ClaimId"])
    except ProtocolError:
        return None
    finally:
        await channel.close()


def owner_session(owner: str, where: Any) -> Any:
    sid, _, private = owner.partition("#")
    return claim_client_session(ClaimSession(sid, hkdf_key(private.rsplit("]", 1)[1].encode()),
                                             {}), where)  # fmt: skip


async def peek(where: Any, session: Any, request: dict[str, Any],
               command: int = Command.STARTER_PEEK) -> tuple[dict[str, Any], list[bytes]]:
    """(the reply ad, each file's bytes) as DCStarter::peek reads them."""
    channel = await connect(where, timeout_s=5)
    try:
        await start_command(channel, where, command, ClientSecurity(timeout_s=5),
                            session=session)  # fmt: skip
        await channel.send(encode_ad(channel.encoder(), from_values(request)).payload())
        return await read_reply(channel)
    finally:
        await channel.close()


async def read_reply(channel: Channel) -> tuple[dict[str, Any], list[bytes]]:
    """(the reply ad with the file count as `count`, each file's bytes), as
    DCStarter::peek reads them."""
    ad = to_classad(decode_ad(channel.decoder(await channel.recv()), "reply"))
    reply = {k: ad.eval(k) for k in ad}
    if reply.get("Result") is not True:
        return reply, []
    got: list[bytes] = []
    dec = channel.decoder(await channel.recv())
    for _ in reply["TransferFiles"]:
        size = dec.get_int()
        dec.get_int()
        assert dec.at_end()
        data = b""
        while len(data) < size:
            data += await channel.recv()
        got.append(data)
        dec = channel.decoder(await channel.recv())
        if size == 0:
            assert dec.get_int() == 666
    reply["count"] = dec.get_int()
    assert dec.at_end()
    return reply, got


def serve(links: ShadowLinks) -> tuple[CommandServer, OwnerSessions]:
    """execd's command server with the pool's own authorization and handlers for the
    three commands (a member with the default identities, nothing else)."""
    security = ServerSecurity(domain="test", timeout_s=5)
    config = SimpleNamespace(authz=AuthzPolicy.from_config(
        {"EXECD_POOL_SCHEDULERS": "condor@*", "EXECD_POOL_ADMINISTRATORS": "root@*"}.get))
    daemon = SimpleNamespace(settings=load_settings(parse_config_text("", filename="x", env={})))
    commands = PoolCommands(cast(Any, SimpleNamespace(config=config, daemon=daemon,
                                                      security=security)))  # fmt: skip
    commands.owners = OwnerSessions(security, links)
    security.authorize = commands.authorize
    security.add_claim_session(claim_session(CLAIM))
    handlers = {command: commands.owner_command for command in (
        Command.CREATE_JOB_OWNER_SEC_SESSION, Command.STARTER_PEEK, Command.START_SSHD)}
    return CommandServer(handlers, security), commands.owners


def test_the_claims_schedd_gets_an_owner_session_that_peeks_only_at_the_jobs_files(
        tmp_path: Path) -> None:  # fmt: skip
    sandbox = sandbox_with_files(tmp_path)
    links = ShadowLinks()
    idle: MessageChannel = Idle()
    link = ShadowLink(idle, claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=60,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    link.owner = OWNER
    links.add(link)
    server, owners = serve(links)
    seen: dict[str, Any] = {}

    async def run() -> None:
        await server.start()
        where = parse_sinful(server.address)
        try:
            seen["wrong"] = await owner_claim(where, CLAIM.replace(SECRET, "d" * 64))
            owner = await owner_claim(where)
            assert owner is not None
            seen["owner"] = owner
            session = owner_session(owner, where)
            seen["early"] = await peek(where, session, {"Out": True, "MaxTransferBytes": 10})
            link.files = job_files(JOB, sandbox, True, os.getuid())
            garbled = await connect(where, timeout_s=5)  # not an ad: dropped, nothing else
            await start_command(garbled, where, Command.STARTER_PEEK, ClientSecurity(timeout_s=5),
                                session=session)  # fmt: skip
            await garbled.send(b"\x00\x01 not an ad")
            with pytest.raises(ProtocolError):
                await garbled.recv()
            await garbled.close()
            seen["tail"] = await peek(where, session, {"Out": True, "OutOffset": -1, "Err": True,
                                                       "ErrOffset": -1, "MaxTransferBytes": 20})
            seen["named"] = await peek(where, session, {
                "Out": False, "Err": False, "TransferFiles": ["empty.txt", "progress.txt"],
                "TransferOffsets": [-1, -1], "MaxTransferBytes": 1024})  # fmt: skip
            seen["offset"] = await peek(where, session, {"Out": True, "OutOffset": len(OUT) - 7,
                                                         "MaxTransferBytes": 1024})
            for name in ("../../etc/passwd", "escape.txt", "gone"):
                seen[name] = await peek(where, session, {"TransferFiles": [name],
                                                         "MaxTransferBytes": 1024})
            seen["numbers"] = await peek(where, session, {"TransferFiles": [1, 2]})
            seen["huge"] = await peek(where, session, {"Out": True, "OutOffset": 10**9,
                                                       "MaxTransferBytes": 1024})
            seen["sshd"] = await peek(where, session, {"Shell": "/bin/sh"}, Command.START_SSHD)
            # the schedd's claim session is no job owner's: it may not peek
            with pytest.raises(ProtocolError):
                await peek(where, claim_client_session(claim_session(CLAIM), where), {})
            link.peek_enabled = lambda: False  # ENABLE_PEEK_JOB false for this job
            seen["disabled"] = await peek(where, session, {"Out": True})
            link.peek_enabled = lambda: True
            link.job_done = True  # the job exited; its output transfer is under way
            seen["done"] = await peek(where, session, {"Out": True})
            link.close()  # the job's conversation ended: its owner sessions with it
            with pytest.raises(ProtocolError, match="no longer knows our session"):
                await peek(where, session, {"Out": True})
        finally:
            await server.close()

    with capture_logs() as events:
        asyncio.run(run())
    assert seen["wrong"] is None  # a claim id not the job's: no answer, as condor_starter
    assert seen["early"][0] == {"Result": False, "Retry": True, "ErrorString":
                                "Retrying request, because the job execution environment "
                                "is not yet ready."}  # fmt: skip
    tail, files = seen["tail"]
    assert tail["TransferFiles"] == [0, 1] and tail["count"] == 2
    assert files == [OUT[-20:].encode(), b""]  # the 20 bytes went to stdout's end
    assert tail["TransferOffsets"] == [len(OUT) - 20, len("err line\n")]
    named, files = seen["named"]
    assert named["TransferFiles"] == ["empty.txt", "progress.txt"] and named["count"] == 2
    assert files == [b"", b"named 1\nnamed 2\n"]  # an empty file's 666 rides the next message
    assert seen["offset"][1] == [OUT[-7:].encode()]
    assert seen["offset"][0]["TransferOffsets"] == [0]  # condor_starter's answer for stdout
    assert seen["../../etc/passwd"][0]["ErrorString"] == \
        "File ../../etc/passwd requested but not authorized to be sent."  # fmt: skip
    assert "Retry" not in seen["../../etc/passwd"][0]
    assert seen["escape.txt"][0]["ErrorString"] == \
        f"Invalid symlink or filename (/etc/passwd) outside sandbox ({sandbox})"  # fmt: skip
    assert seen["gone"][0]["Retry"] is True
    assert seen["numbers"][0]["ErrorString"] == "Could not evaluate transfer list."
    huge, files = seen["huge"]  # an offset past the end: nothing, from the end
    assert files == [b""] and huge["count"] == 1
    assert seen["disabled"][0] == {"Result": False, "ErrorString":
                                   "Rejecting request, because ENABLE_PEEK_JOB=false"}  # fmt: skip
    assert seen["done"][0] == {"Result": False, "ErrorString":
                               "Rejecting request, because the job is finished."}  # fmt: skip
    # START_SSHD before the job runs: condor_starter's retry (execd.wire.job_sshd)
    assert seen["sshd"][0] == {"Result": False, "Retry": True, "ErrorString":
                               "Retrying request, because the job execution environment is "
                               "not yet ready."}  # fmt: skip
    assert len(owners) == 0
    secret = seen["owner"].rsplit("]", 1)[1]
    assert not any(secret in str(e) or SECRET in str(e) or "d" * 64 in str(e) for e in events)
    assert any(e["event"] == "job_owner_session_refused" for e in events)
    dropped = [e["reason"] for e in events if e["event"] == "wire_connection_dropped"]
    assert dropped[1] == "STARTER_PEEK ad announces 317133665083489 attributes"  # garbled
    assert any(e["event"] == "pool_command_refused" and e["command"] == Command.STARTER_PEEK
               and e["why"] == "not the job owner's session" for e in events)  # the schedd's
    created = [e for e in events if e["event"] == "job_owner_session_created"]
    assert created and created[0]["user"] == OWNER


def test_stdout_and_stderr_take_the_names_condor_starter_gives_them() -> None:
    box = Path("/x")
    def names(job: dict[str, Any], transfer: bool = True) -> tuple[str | None, str | None]:
        files = job_files(job, box, transfer, 1)
        return files.stdout, files.stderr

    assert names(JOB) == ("_condor_stdout", "_condor_stderr")
    assert names({**JOB, "Err": "out.txt"}) == ("_condor_stdout", "_condor_stdout")
    assert names({**JOB, "Out": "/dev/null"}) == ("/dev/null", "_condor_stderr")
    # a streamed Err is not in the sandbox: peek names the job ad's Err as it is, as
    # condor_starter's jobErrorFilename (getJobStdFile) does for a streamed file
    assert names({**JOB, "StreamErr": True}) == ("_condor_stdout", "err.txt")
    assert names(JOB, transfer=False) == ("out.txt", "err.txt")  # no file transfer
    assert job_files(JOB, box, True, 1).outputs == ("progress.txt", "empty.txt",
                                                   "escape.txt", "gone")  # fmt: skip


def test_a_job_keeps_its_latest_owner_sessions_and_none_after_its_end() -> None:
    security = ServerSecurity(domain="test")
    owners = OwnerSessions(security, ShadowLinks())
    link = ShadowLink(Idle(), claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=60,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    made = [owners.create(link).split("#", 1)[0] for _ in range(SESSIONS_PER_JOB + 4)]
    assert len(owners) == SESSIONS_PER_JOB
    assert set(security.sessions) == set(made[4:])
    assert all(security.sessions[sid].peer.user == DUMMY_OWNER for sid in made[4:])
    link.close()
    assert len(owners) == 0 and not security.sessions


@pytest.mark.parametrize(("knob", "enabled"), [
    ("", True), ("ENABLE_PEEK_JOB = false", False), ("ENABLE_PEEK_JOB = 0", False),
    ('ENABLE_PEEK_JOB = TARGET.User == "alice@pool.example"', True),
    ('ENABLE_PEEK_JOB = TARGET.User == "bob@pool.example"', False),
    ("ENABLE_PEEK_JOB = MY.Cpus > 4", False), ("ENABLE_PEEK_JOB = no_such_attr", True),
])  # fmt: skip
def test_enable_peek_job_is_read_as_condor_starter_reads_it(tmp_path: Path, knob: str,
                                                            enabled: bool) -> None:  # fmt: skip
    config = tmp_path / "condor_config"
    config.write_text(knob + "\n")
    settings = load_settings(load_config(config, env={}))
    assert peek_enabled(settings, new_ad({"Cpus": 2}), dict(JOB)) is enabled
