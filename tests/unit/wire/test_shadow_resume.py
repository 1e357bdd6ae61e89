"""A conversation a restarted daemon goes on with (execd.wire.shadow_resume), with a real
job process (as nobody) and real socket pairs: on the connection the old image handed
over, it asks for the file transfer session and goes on to job_exit; without one it
waits for the shadow's reconnect; cancelled again (another restart) between two calls,
it hands its connection over and its sandbox stays."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from test_shadow_reconnect_job import CLAIM, shadow
from wire_pairs import channel_pair

from execd.errors import ProtocolError
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.conversation_record import Conversation
from execd.wire.output_files import CHIRP_CONFIG
from execd.wire.reconnect import ReconnectJob
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_job import JobProcess
from execd.wire.shadow_link import ShadowLinks, session_id
from execd.wire.shadow_resume import resume_shadow
from execd.wire.shadow_syscalls import (
    EVENT_NOTIFICATION,
    GET_SEC_SESSION_INFO,
    JOB_EXIT,
    REGISTER_JOB_INFO,
    MessageChannel,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as nobody: needs root")


def conversation(sandbox: Path) -> Conversation:
    """A job without file transfer (its output stays where it is)."""
    return Conversation("vm#1.0#1", {"ClusterId": "1", "ProcId": "0"}, str(sandbox), [], {},
                        False, {"Name": '"slot1_1@vm"'}, 30.0, 1795423816)  # fmt: skip


def started(path: Path, ids: tuple[int, int], script: str) -> JobProcess:
    return JobProcess(["/bin/sh", "-c", script], path, {"PATH": "/bin:/usr/bin"}, ids, None)


def resumed_on_a_kept_connection(path: Path, proc: JobProcess,
                                 links: ShadowLinks | None = None) -> list[int]:  # fmt: skip
    """The old image's job adopted and its conversation resumed on the kept connection
    to a shadow, to its end: the calls the shadow got."""
    async def scenario() -> list[int]:
        await proc.start()
        ours, theirs = await channel_pair()
        calls: list[int] = []
        peer = asyncio.create_task(shadow(theirs, calls, asyncio.Event()))
        kept = links if links is not None else ShadowLinks()
        options = ShadowOptions(update_interval_s=0.2, links=kept, keep_sandbox=True)
        await resume_shadow(CLAIM, conversation(path), proc, options, ours)
        peer.cancel()
        await ours.close()
        await theirs.close()
        return calls

    return asyncio.run(scenario())


def test_on_the_kept_connection_it_goes_on_to_job_exit(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    calls = resumed_on_a_kept_connection(path, started(path, ids, "sleep 0.5; exit 3"))
    assert calls[0] == GET_SEC_SESSION_INFO and calls[1] == REGISTER_JOB_INFO
    assert calls[-3:] == [EVENT_NOTIFICATION, REGISTER_JOB_INFO, JOB_EXIT]


def test_the_sandboxs_chirp_config_is_never_read_back(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """The job owns its sandbox and runs on through the restart: whatever it made of
    .chirp.config (here a port no socket can have) is not the new image's concern."""
    path, ids = box
    (path / CHIRP_CONFIG).write_text("127.0.0.1 70000 " + "a" * 31 + "\n")
    links = ShadowLinks()
    calls = resumed_on_a_kept_connection(path, started(path, ids, "exit 0"), links)
    assert calls[-1] == JOB_EXIT  # the conversation went on to its end
    assert links.by_session(session_id(CLAIM)) is None  # and let go of its link


def test_without_a_connection_it_waits_for_the_shadows_reconnect(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    proc = started(path, ids, "sleep 1; exit 0")

    async def scenario() -> list[int]:
        await proc.start()
        links = ShadowLinks()
        options = ShadowOptions(update_interval_s=0.2, links=links, keep_sandbox=True)
        resumed = asyncio.create_task(resume_shadow(CLAIM, conversation(path), proc, options))
        while (link := links.by_session(session_id(CLAIM))) is None:
            await asyncio.sleep(0.01)  # the task has not run yet: nothing to await
        await link.disconnected.wait()  # its first call found no connection
        ours, theirs = await channel_pair()
        calls: list[int] = []
        peer = asyncio.create_task(shadow(theirs, calls, asyncio.Event()))
        handler = asyncio.create_task(link.offer(ours, ReconnectJob(
            "<shadow>", "", "vm", "<shadow>", "1#key")))  # fmt: skip
        await resumed
        await handler
        peer.cancel()
        await ours.close()
        await theirs.close()
        return calls

    calls = asyncio.run(scenario())
    assert calls[0] == GET_SEC_SESSION_INFO and calls[-1] == JOB_EXIT


def test_cancelled_between_two_calls_it_hands_its_connection_over(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    proc = started(path, ids, "sleep 30")
    (path / "output.txt").write_text("kept\n")
    offered: list[MessageChannel | None] = []

    def handover(channel: MessageChannel | None, proxy: ChirpProxy | None,
                 streams: object, transfer: object) -> bool:  # fmt: skip
        offered.append(channel)
        return True

    async def scenario() -> bool:
        await proc.start()
        ours, theirs = await channel_pair()
        calls: list[int] = []
        seen = asyncio.Event()
        peer = asyncio.create_task(shadow(theirs, calls, seen))
        links = ShadowLinks()
        options = ShadowOptions(update_interval_s=5, links=links, handover=handover)
        resumed = asyncio.create_task(resume_shadow(CLAIM, conversation(path), proc, options,
                                                    ours))  # fmt: skip
        while REGISTER_JOB_INFO not in calls:
            seen.clear()
            await seen.wait()
        link = links.by_session(session_id(CLAIM))
        assert link is not None
        answered = link.last_rpc
        while link.last_rpc == answered:  # until the update's answer is in: between calls
            await asyncio.sleep(0.01)
        resumed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resumed
        peer.cancel()
        await ours.close()
        await theirs.close()
        proc.kill()  # the job a next image would adopt: ended here, reaped in this loop
        await proc.wait(10)
        return offered == [ours]

    assert asyncio.run(scenario())
    assert (path / "output.txt").read_text() == "kept\n"  # the sandbox stays


def test_a_claim_released_before_it_resumed_ends_the_wait_for_the_shadow(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """The schedd's RELEASE_CLAIM came while the restarted daemon was adopting the old
    image's connection, before the job's link was registered (so it found none): the
    resumed conversation sees the claim is gone and waits for no reconnect (before, it
    waited out the whole job lease, 30 s here)."""
    path, ids = box
    proc = started(path, ids, "sleep 30")

    async def scenario() -> str:
        await proc.start()
        options = ShadowOptions(update_interval_s=0.2, links=ShadowLinks(), keep_sandbox=True,
                                claim_held=lambda: False)  # fmt: skip
        try:
            with pytest.raises(ProtocolError) as ended:
                await asyncio.wait_for(resume_shadow(CLAIM, conversation(path), proc, options),
                                       10)  # fmt: skip
        finally:
            proc.kill()
            await proc.wait(10)
        return str(ended.value)

    assert "the schedd released the claim" in asyncio.run(scenario())


def test_a_call_held_by_a_quiesce_goes_on_when_nothing_is_handed_over(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """A restart quiesced the calls and a reconnect came meanwhile (its adopt waits at
    the closed gate); the conversation then ends with no handover to make
    (ShadowOptions.handover None): the gate reopens with the conversation's end, so the
    reconnect's handler returns (its connection let go). Before, only hand_over
    reopened it, after its early return for no handover: the handler stayed pending
    (wait_for 5 s: TimeoutError)."""
    path, ids = box
    proc = started(path, ids, "sleep 30")

    async def scenario() -> list[int]:
        await proc.start()
        ours, theirs = await channel_pair()
        calls: list[int] = []
        seen = asyncio.Event()
        peer = asyncio.create_task(shadow(theirs, calls, seen))
        links = ShadowLinks()
        options = ShadowOptions(update_interval_s=5, links=links, keep_sandbox=True)
        resumed = asyncio.create_task(resume_shadow(CLAIM, conversation(path), proc, options,
                                                    ours))  # fmt: skip
        while REGISTER_JOB_INFO not in calls:
            seen.clear()
            await seen.wait()
        link = links.by_session(session_id(CLAIM))
        assert link is not None and link.quiesce is not None
        answered = link.last_rpc
        while link.last_rpc == answered:  # until the update's answer is in: between calls
            await asyncio.sleep(0.01)
        assert await asyncio.wait_for(link.quiesce(5.0), 5) is True
        new_ours, new_theirs = await channel_pair()
        new_calls: list[int] = []
        new_peer = asyncio.create_task(shadow(new_theirs, new_calls, asyncio.Event()))
        handler = asyncio.create_task(link.offer(new_ours, ReconnectJob(
            "<shadow>", "", "vm", "<shadow>", "1#key")))  # fmt: skip
        await asyncio.sleep(0.2)
        assert not handler.done()  # its adopt waits at the gate
        resumed.cancel()
        with pytest.raises(asyncio.CancelledError):
            await resumed
        await asyncio.wait_for(handler, 5)
        for task in (peer, new_peer):
            task.cancel()
        await asyncio.gather(peer, new_peer, return_exceptions=True)
        for channel in (ours, theirs, new_ours, new_theirs):
            await channel.close()
        proc.kill()
        await proc.wait(10)
        return new_calls

    assert asyncio.run(scenario()) in ([], [GET_SEC_SESSION_INFO])
