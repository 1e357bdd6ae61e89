"""Before a restart in place cancels the job conversations, their shadow calls are
quiesced (execd.wire.call_turns): the call under way is answered, no new call goes
out, so the connection is handed to the next image between two messages. Shadows on
real encrypted socket pairs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from structlog.testing import capture_logs
from test_wire_handover import encrypted_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import LSEEK
from execd.wire.handover import adopt_connection, export_connection, hand_over
from execd.wire.reconnect import ReconnectJob
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink, ShadowLinks
from execd.wire.shadow_syscalls import MessageChannel, ShadowConnectionLostError
from execd.wire.streamed_output import StreamedOutput

REGISTER_JOB_INFO = -81


def _link(channel: Channel) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=600.0, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


def _exporting(records: list[dict[str, Any] | None]) -> ShadowOptions:
    """The daemon's handover as pool_conversation makes it: the connection exported."""
    def handover(channel: MessageChannel | None, proxy: Any, streams: Any,
                 transfer: Any) -> bool:  # fmt: skip
        records.append(export_connection(channel) if isinstance(channel, Channel) else None)
        return True

    return ShadowOptions(handover=handover)


async def _calls(ours: Channel) -> tuple[ShadowFileCalls, ShadowLink]:
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    return calls, link


def test_a_call_in_flight_when_the_quiesce_starts_is_answered_and_the_connection_handed_over(
) -> None:  # fmt: skip
    asyncio.run(_call_in_flight())


async def _call_in_flight() -> None:
    """register_job_info is sent, its answer not read yet, when the restart quiesces the
    calls: the quiesce waits for the answer; then the connection is between messages,
    is exported, and the shadow goes on with the next image's message. Before, the
    restart cancelled the conversation mid-call and nothing was handed over."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    update = asyncio.create_task(calls.register_job_info({"ImageSize": "1000"}))
    request = theirs.decoder(await asyncio.wait_for(theirs.recv(), 5))
    assert request.get_int32("call") == REGISTER_JOB_INFO
    quiesced = asyncio.create_task(calls.quiesce(5.0))
    for _ in range(10):  # it waits for the answer, however long the loop runs
        await asyncio.sleep(0)
    assert not quiesced.done() and not update.done()
    await theirs.send(theirs.encoder().put_int(0).payload())  # the shadow answers
    assert await asyncio.wait_for(quiesced, 5) is True
    await asyncio.wait_for(update, 5)  # answered, no error
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    [record] = records
    assert record is not None  # exported: the next image goes on with the connection
    await ours.close()
    adopted = await adopt_connection(record, timeout_s=5)
    assert adopted is not None
    await adopted.send(b"the next image's first call")
    assert await asyncio.wait_for(theirs.recv(), 5) == b"the next image's first call"
    link.close()
    for channel in (adopted, theirs):
        await channel.close()


def test_a_call_made_during_the_quiesce_does_not_go_out_on_the_old_image() -> None:
    asyncio.run(_call_during_quiesce())


async def _call_during_quiesce() -> None:
    """A stream's write (lseek) made once the quiesce began waits; the connection is
    handed over and the write fails as on a lost connection (the stream's next image
    sends its held piece): the shadow's next message is the next image's."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    assert await asyncio.wait_for(calls.quiesce(5.0), 5) is True  # idle: at once
    write = calls.owned(calls.file_call(LSEEK, "lseek", 5, 0, 0, connection=0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not write.done() and calls.idle  # held back before the lock: not in a call
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    assert records[0] is not None
    with pytest.raises(ShadowConnectionLostError, match="handed to the next image"):
        await asyncio.wait_for(write, 5)
    await ours.send(b"the next image's")
    assert await asyncio.wait_for(theirs.recv(), 5) == b"the next image's"
    link.close()
    for channel in (ours, theirs):
        await channel.close()


def test_a_shadow_that_never_answers_bounds_the_quiesce() -> None:
    asyncio.run(_never_answered())


async def _never_answered() -> None:
    """The shadow reads the call and never answers: the quiesce gives up after its
    bound, says so (shadow_call_not_quiesced), and the connection is not handed over
    (the shadow reconnects to the next image, as before)."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    links = ShadowLinks()
    links.add(link)
    update = asyncio.create_task(calls.register_job_info({"ImageSize": "1000"}))
    await asyncio.wait_for(theirs.recv(), 5)
    with capture_logs() as events:
        await asyncio.wait_for(links.quiesce(0.2), 5)
    assert [e for e in events if e["event"] == "shadow_call_not_quiesced"] == [
        {"event": "shadow_call_not_quiesced", "job": "j", "waited_s": 0.2,
         "log_level": "warning", "component": "wire"}]  # fmt: skip
    update.cancel()  # the conversation's cancel
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    assert records == [None]
    link.close()
    await asyncio.gather(update, return_exceptions=True)
    for channel in (ours, theirs):
        await channel.close()


def test_a_putfile_between_its_two_messages_is_let_finish_before_the_handover() -> None:
    asyncio.run(_putfile_in_flight())


async def _putfile_in_flight() -> None:
    """A Chirp put: the shadow has answered putfile's open and the job's bytes are not
    there yet when the restart quiesces the calls: the bytes go out and their count is
    read before the connection is handed over (the next call is not taken for them)."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    opened, job_bytes = asyncio.Event(), asyncio.Event()

    async def the_jobs_bytes(fd: int) -> bytes:
        opened.set()
        await job_bytes.wait()
        return b"12345"

    put = asyncio.create_task(calls.putfile("out.dat", 0o644, 5, the_jobs_bytes))
    await asyncio.wait_for(theirs.recv(), 5)  # putfile's path, mode, length
    await theirs.send(theirs.encoder().put_int(0).payload())  # opened
    await asyncio.wait_for(opened.wait(), 5)
    quiesced = asyncio.create_task(calls.quiesce(5.0))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not quiesced.done()
    job_bytes.set()
    await asyncio.wait_for(theirs.recv(), 5)  # the bytes
    await theirs.send(theirs.encoder().put_int(5).payload())  # 5 written
    assert await asyncio.wait_for(quiesced, 5) is True
    assert await asyncio.wait_for(put, 5) == 5
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    assert records[0] is not None
    await ours.send(b"the next image's")
    assert await asyncio.wait_for(theirs.recv(), 5) == b"the next image's"
    link.close()
    for channel in (ours, theirs):
        await channel.close()


def test_a_call_whose_connection_is_lost_during_the_quiesce_ends_it_at_once() -> None:
    asyncio.run(_lost_during_quiesce())


async def _lost_during_quiesce() -> None:
    """register_job_info waits for its answer when the restart quiesces the calls, and
    the shadow's end goes away: the call waits for the reconnect in its turn, nothing
    is left to let finish, and the quiesce ends then, not at its bound. Before, it was
    looked at again only when a turn ended: 3.0 s of a 3.0 s bound, and
    shadow_call_not_quiesced."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    links = ShadowLinks()
    links.add(link)
    update = asyncio.create_task(calls.register_job_info({"ImageSize": "1000"}))
    await asyncio.wait_for(theirs.recv(), 5)
    start = time.monotonic()
    with capture_logs() as events:
        quiesced = asyncio.create_task(links.quiesce(3.0))
        await asyncio.sleep(0.1)
        await theirs.close()  # the shadow's end goes away mid-call
        await asyncio.wait_for(quiesced, 5)
    assert time.monotonic() - start < 1.5
    assert link.disconnected.is_set()
    assert "shadow_call_not_quiesced" not in [e["event"] for e in events]
    update.cancel()  # the conversation's cancel
    link.close()
    await asyncio.gather(update, return_exceptions=True)
    await ours.close()


def test_a_reconnect_whose_sessions_failed_does_not_hold_the_quiesce() -> None:
    asyncio.run(_failed_adopt())


async def _failed_adopt() -> None:
    """A reconnect's connection is taken and gone before get_sec_session_info is
    answered (adopt_reconnect fails quietly: the next call waits for a reconnect): the
    connection is given up, so a quiesce has nothing to wait for. Before: it waited its
    whole bound (in_call was left set) and said shadow_call_not_quiesced."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    new_ours, new_theirs = await encrypted_pair()
    await new_theirs.close()  # the new shadow goes away at once
    handler = asyncio.create_task(link.offer(new_ours, ReconnectJob(
        "<shadow>", "", "vm", "<shadow>", "1#key")))  # fmt: skip
    for _ in range(100):
        await asyncio.sleep(0.01)
        if calls.channel is new_ours and not calls.turns.lock.locked():
            break
    assert calls.channel is new_ours and calls.in_call  # adopted, its sessions failed
    start = time.monotonic()
    assert await asyncio.wait_for(calls.quiesce(3.0), 5) is True
    assert time.monotonic() - start < 1.0
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    assert records == [None]  # nothing to hand over: the shadow reconnects to the next image
    link.close()
    await asyncio.wait_for(handler, 5)
    for channel in (ours, theirs, new_ours):
        await channel.close()


def test_an_update_cancelled_before_its_answer_leaves_the_connection_idle_once_answered(
) -> None:  # fmt: skip
    asyncio.run(_cancelled_update())


async def _cancelled_update() -> None:
    """An update cancelled mid-exchange (a stream's hold cancels it) before the shadow
    answers; the answer then comes and is read for nothing: the connection is between
    messages, so a later restart's quiesce ends at once and the connection is handed
    over. Before, in_call stayed set until the next call: the quiesce waited its whole
    bound, shadow_call_not_quiesced, and the connection was dropped (records [None])."""
    ours, theirs = await encrypted_pair()
    calls, link = await _calls(ours)
    update = asyncio.create_task(calls.register_job_info({"ImageSize": "1000"}))
    await asyncio.wait_for(theirs.recv(), 5)
    update.cancel()
    await asyncio.gather(update, return_exceptions=True)
    await theirs.send(theirs.encoder().put_int(0).payload())  # the answer, read for nothing
    for _ in range(100):
        await asyncio.sleep(0.01)
        if calls._unfinished is not None and calls._unfinished[1].done():
            break
    start = time.monotonic()
    assert await asyncio.wait_for(calls.quiesce(3.0), 5) is True
    assert time.monotonic() - start < 1.0
    records: list[dict[str, Any] | None] = []
    assert hand_over(calls, link, _exporting(records), None, StreamedOutput({}))
    assert records[0] is not None
    await ours.send(b"the next image's")
    assert await asyncio.wait_for(theirs.recv(), 5) == b"the next image's"
    link.close()
    for channel in (ours, theirs):
        await channel.close()
