"""DELEGATE_GSI_CRED_STARTER (500): the shadow's renewed X509 proxy for a running job.
UPDATE_GSI_CRED (487): the same, the proxy sent as a file (ReliSock::put_file).
The sender is tests/unit/wire/x509_sender.py (HTCondor's x509_send_delegation); the job
is a ShadowLink found by the claim's session; the reply is one int, 1 replaced, 0 not.
Sandboxes are owned by a job user (not root: a root-owned sandbox is refused)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from structlog.testing import capture_logs
from x509_sender import Answer, Credential, Shadow, enc

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.pool_commands import PoolCommands
from execd.daemon.pool_settings import pool_settings
from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.claim_session import MATCH_SESSION_USER
from execd.wire.commands import Command
from execd.wire.encoding import Decoder
from execd.wire.proxy_refresh import (
    ProxyTarget,
    proxy_target,
    replace_proxy,
    serve_proxy_refresh,
    serve_proxy_update,
)
from execd.wire.server import Peer
from execd.wire.shadow_link import ShadowLink, ShadowLinks

JOB_UID = 65534
CLAIM_ID = "<127.0.0.1:9618>#1#7#secret"
SID = "<127.0.0.1:9618>#1#7"


def sandbox(tmp_path: Path) -> Path:
    directory = tmp_path / "dir_1"
    directory.mkdir()
    os.chown(directory, JOB_UID, 0)
    (directory / "proxy.pem").write_bytes(b"old")
    return directory


def target(directory: Path, name: str = "proxy.pem") -> ProxyTarget:
    found = proxy_target(str(directory), name)
    assert found is not None
    return found


def test_a_refreshed_proxy_replaces_the_old_one_and_a_stale_tmp(tmp_path: Path) -> None:
    # written to <name>.tmp, given to the job's user, renamed over the proxy; a link the
    # job left at the .tmp name is removed, not followed (nor is a FIFO opened)
    box = sandbox(tmp_path)
    (box / "proxy.pem.tmp").symlink_to(tmp_path / "elsewhere")
    replace_proxy(target(box), b"new")
    assert (box / "proxy.pem").read_bytes() == b"new"
    st = (box / "proxy.pem").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, JOB_UID)
    assert sorted(os.listdir(box)) == ["proxy.pem"] and not (tmp_path / "elsewhere").exists()
    os.mkfifo(box / "proxy.pem.tmp")
    replace_proxy(target(box), b"newer")
    assert (box / "proxy.pem").read_bytes() == b"newer"
    assert sorted(os.listdir(box)) == ["proxy.pem"]


def test_a_failed_refresh_leaves_no_tmp_with_the_key(tmp_path: Path) -> None:
    # the job made its proxy's name a directory: the rename fails, the .tmp goes
    box = sandbox(tmp_path)
    (box / "proxy.pem").unlink()
    (box / "proxy.pem").mkdir()
    with pytest.raises(OSError):
        replace_proxy(target(box), b"-----BEGIN PRIVATE KEY-----")
    assert sorted(os.listdir(box)) == ["proxy.pem"] and (box / "proxy.pem").is_dir()


def test_a_directory_at_the_tmp_name_fails_the_refresh_and_stays(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    (box / "proxy.pem.tmp").mkdir()
    with pytest.raises(OSError):
        replace_proxy(target(box), b"new")
    assert (box / "proxy.pem").read_bytes() == b"old" and (box / "proxy.pem.tmp").is_dir()


def test_a_sandbox_swapped_for_a_link_or_another_directory_gets_nothing(tmp_path: Path) -> None:
    # a job that can write EXECUTE replaces its dir_N after the target was recorded
    box = sandbox(tmp_path)
    recorded = target(box)
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    box.rename(tmp_path / "moved")
    box.symlink_to(elsewhere)
    with pytest.raises(OSError):
        replace_proxy(recorded, b"new")
    assert proxy_target(str(box), "proxy.pem") is None  # as a resume would find it
    box.unlink()
    box.mkdir()
    os.chown(box, JOB_UID, 0)
    with pytest.raises(PermissionError):  # not the recorded inode
        replace_proxy(recorded, b"new")
    assert os.listdir(box) == [] and os.listdir(elsewhere) == []


def test_a_root_owned_sandbox_gets_nothing(tmp_path: Path) -> None:
    box = sandbox(tmp_path)
    os.chown(box, 0, 0)
    with pytest.raises(PermissionError):
        replace_proxy(target(box), b"new")
    assert (box / "proxy.pem").read_bytes() == b"old"


def job_link(box: Path | None, links: ShadowLinks, *, transfer: bool = True,
             name: str = "proxy.pem") -> ShadowLink:  # fmt: skip
    """A running job's link; box None: its sandbox was not a directory when it started."""
    link = ShadowLink(cast(Any, None), claim_id=CLAIM_ID, global_job_id="s#1.0#1",
                      lease_s=None, starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    link.file_transfer, link.proxy_name = transfer, name if transfer else None
    link.proxy = target(box, name) if box is not None and transfer else None
    links.add(link)
    return link


def refresh(answer: bytes | Answer, links: ShadowLinks, sid: str = SID) -> Shadow:
    """The shadow's side after the command: our request, its answer, our int reply."""
    shadow = Shadow([("send", b""), ("recv", answer), ("send", b"")])
    peer = Peer(user=MATCH_SESSION_USER, method="MATCH", sid=sid, address="127.0.0.1:5")
    asyncio.run(serve_proxy_refresh(cast(Channel, shadow), peer, links))
    return shadow


def reply(shadow: Shadow) -> int:
    dec = Decoder(shadow.sent[-1], encrypted=True)
    value = dec.get_int()
    dec.finish()
    return value


def test_the_claims_session_finds_its_job_and_the_reply_is_1(tmp_path: Path) -> None:
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    shadow = refresh(Credential().answer, links)
    assert not shadow.script and reply(shadow) == 1
    assert b"-----BEGIN PRIVATE KEY-----" in (box / "proxy.pem").read_bytes()
    assert os.listdir(box) == ["proxy.pem"]


def test_a_bad_answer_is_replied_0_and_writes_nothing(tmp_path: Path) -> None:
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    shadow = refresh(enc().put_int(0).payload(), links)  # the sender failed
    assert not shadow.script and reply(shadow) == 0
    assert (box / "proxy.pem").read_bytes() == b"old"


def test_a_job_that_ends_during_the_exchange_gets_no_proxy(tmp_path: Path) -> None:
    # serve_shadow's end closes the link and removes the sandbox meanwhile
    box, links = sandbox(tmp_path), ShadowLinks()
    link = job_link(box, links)
    credential = Credential()

    def answer_as_the_job_ends(request: bytes) -> bytes:
        link.close()
        return credential.answer(request)

    shadow = refresh(answer_as_the_job_ends, links)
    assert not shadow.script and reply(shadow) == 0
    assert (box / "proxy.pem").read_bytes() == b"old" and os.listdir(box) == ["proxy.pem"]


@pytest.mark.parametrize("case", ["no link", "no proxy", "closed"])
def test_no_job_to_refresh_means_no_key_and_no_exchange(tmp_path: Path, case: str) -> None:
    # a DAEMON peer on no claim's session (or a job without a proxy in its sandbox, or one
    # that has ended): the connection is closed before a key is made or anything is sent
    links = ShadowLinks()
    if case != "no link":
        link = job_link(sandbox(tmp_path) if case == "closed" else None, links)
        if case == "closed":
            link.close()
    shadow = Shadow([])
    peer = Peer(user="condor@pool", method="FS", sid=SID, address="127.0.0.1:5")
    with capture_logs() as events:
        asyncio.run(serve_proxy_refresh(cast(Channel, shadow), peer, links))
    assert shadow.sent == []
    assert [e["event"] for e in events] == ["x509_proxy_refresh_refused"]


def test_commands_500_and_487_come_from_the_claims_session_or_a_daemon() -> None:
    """execd judges it as a claim command (condor_starter registers it at WRITE, on a
    starter only the shadow knows the address of): a WRITE-only peer and a job owner's
    session are refused."""
    config = pool_settings(load_settings(parse_config_text(
        "COLLECTOR_HOST = 127.0.0.1:9618\nALLOW_WRITE = *\nALLOW_DAEMON = condor@pool\n",
        filename="execd.conf", env={})))  # fmt: skip
    owners = SimpleNamespace(is_owner_session=lambda sid: sid == "owner",
                             holder=lambda peer: object())  # fmt: skip
    commands = cast(Any, SimpleNamespace(member=SimpleNamespace(config=config), owners=owners))

    def may(command: int, user: str, method: str, sid: str = SID) -> bool:
        peer = Peer(user=user, method=method, sid=sid, address="127.0.0.1:5")
        return bool(PoolCommands.judge(commands, command, peer))

    with capture_logs():
        for command in (Command.DELEGATE_GSI_CRED_STARTER, Command.UPDATE_GSI_CRED):
            assert may(command, MATCH_SESSION_USER, "MATCH")
            assert may(command, "condor@pool", "FS")
            assert not may(command, "alice@pool", "FS")  # WRITE only
            assert not may(command, "alice@pool", "TOKEN", sid="owner")  # condor_tail's


def update(messages: list[bytes], links: ShadowLinks) -> Shadow:
    """UPDATE_GSI_CRED's messages after the command, then our int reply."""
    shadow = Shadow([*(("recv", m) for m in messages), ("send", b"")])
    peer = Peer(user=MATCH_SESSION_USER, method="MATCH", sid=SID, address="127.0.0.1:5")
    asyncio.run(serve_proxy_update(cast(Channel, shadow), peer, links))
    return shadow


def put_file(text: bytes, chunk: int = 4) -> list[bytes]:
    """ReliSock::put_file: the size message, then the bytes in chunks."""
    return [enc().put_int(len(text)).put_int(chunk).payload(),
            *(text[i:i + chunk] for i in range(0, len(text), chunk))]  # fmt: skip


def test_a_proxy_sent_as_a_file_replaces_the_jobs(tmp_path: Path) -> None:
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    shadow = update(put_file(b"renewed proxy"), links)
    assert not shadow.script and reply(shadow) == 1
    assert (box / "proxy.pem").read_bytes() == b"renewed proxy"
    st = (box / "proxy.pem").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, JOB_UID)
    assert os.listdir(box) == ["proxy.pem"]


def test_a_proxy_file_too_large_is_replied_0_after_its_size_alone(tmp_path: Path) -> None:
    # nothing after the size header is read: a peer announcing 2**63 bytes does not
    # keep the handler receiving; the reply comes at once and the connection ends
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    for size in ((1 << 20) + 1, (1 << 63) - 1):
        with capture_logs() as events:
            shadow = update([enc().put_int(size).put_int(65536).payload()], links)
        assert not shadow.script and reply(shadow) == 0
        assert events[0]["why"] == "the proxy file is larger than 1048576 bytes"
    assert (box / "proxy.pem").read_bytes() == b"old"


def test_an_empty_proxy_file_comes_with_the_666_marker(tmp_path: Path) -> None:
    # ReliSock::put_file of a zero-length file: size 0, then the int 666
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    shadow = update([enc().put_int(0).put_int(65536).payload(), enc().put_int(666).payload()],
                    links)  # fmt: skip
    assert not shadow.script and reply(shadow) == 1
    assert (box / "proxy.pem").read_bytes() == b"" and os.listdir(box) == ["proxy.pem"]
    (box / "proxy.pem").write_bytes(b"old")
    with capture_logs():
        shadow = update([enc().put_int(0).put_int(65536).payload(),
                         enc().put_int(667).payload()], links)  # fmt: skip
    assert not shadow.script and reply(shadow) == 0
    assert (box / "proxy.pem").read_bytes() == b"old"


class CutOffShadow(Shadow):
    """Sends the first messages of a file, then its connection fails with `error`."""

    def __init__(self, messages: list[bytes], error: Exception) -> None:
        super().__init__([*(("recv", m) for m in messages), ("send", b"")])
        self.error = error
        self.left = len(messages)

    async def recv(self, timeout_s: float | None = None) -> bytes:
        if not self.left:
            raise self.error
        self.left -= 1
        return await super().recv(timeout_s)


@pytest.mark.parametrize("error", [RemoteProtocolError("the peer closed the connection"),
                                   TimeoutError()])  # fmt: skip
def test_a_proxy_file_cut_off_or_late_is_replied_0(tmp_path: Path, error: Exception) -> None:
    # condor_starter answers 0 when get_file fails; execd ended the connection unanswered
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links)
    shadow = CutOffShadow([enc().put_int(10).put_int(4).payload(), b"rene"], error)
    peer = Peer(user=MATCH_SESSION_USER, method="MATCH", sid=SID, address="127.0.0.1:5")
    with capture_logs() as events:
        asyncio.run(serve_proxy_update(cast(Channel, shadow), peer, links))
    assert not shadow.script and reply(shadow) == 0
    assert [e["event"] for e in events] == ["x509_proxy_refresh_failed"]
    assert (box / "proxy.pem").read_bytes() == b"old" and os.listdir(box) == ["proxy.pem"]


def test_a_nul_in_the_proxys_name_is_replied_0(tmp_path: Path) -> None:
    # x509userproxy = "proxy\0.pem": os.open's ValueError escaped the handler
    box, links = sandbox(tmp_path), ShadowLinks()
    job_link(box, links, name="proxy\0.pem")
    with capture_logs() as events:
        shadow = update(put_file(b"renewed proxy"), links)
    assert not shadow.script and reply(shadow) == 0
    assert "embedded null byte" in events[0]["why"]
    assert os.listdir(box) == ["proxy.pem"]


def test_only_a_job_without_file_transfer_declines_the_file(tmp_path: Path) -> None:
    # condor_starter answers 2 at once only for a job without file transfer: the
    # shadow stops checking the proxy for good; no claim at all: the connection is closed
    links = ShadowLinks()
    job_link(None, links, transfer=False)
    with capture_logs():
        shadow = update([], links)
        assert reply(shadow) == 2
        nobody = Shadow([])
        peer = Peer(user="condor@pool", method="FS", sid="other", address="127.0.0.1:5")
        asyncio.run(serve_proxy_update(cast(Channel, nobody), peer, links))
    assert nobody.sent == []


def test_a_job_whose_sandbox_was_unusable_gets_0_not_declined(tmp_path: Path) -> None:
    # file transfer, but the sandbox was missing or no directory at start or resume: 0,
    # so the shadow tries again later (2 would stop its proxy timer for good)
    links = ShadowLinks()
    job_link(None, links)
    with capture_logs() as events:
        shadow = update(put_file(b"renewed proxy"), links)
    assert not shadow.script and reply(shadow) == 0
    assert events[0]["why"] == "the job's sandbox was not its directory when it started or resumed"


def test_a_job_with_no_proxy_gets_no_answer(tmp_path: Path) -> None:
    links = ShadowLinks()
    link = job_link(sandbox(tmp_path), links)
    link.proxy_name = link.proxy = None
    with capture_logs():
        shadow = update([], links)
    assert shadow.sent == []
