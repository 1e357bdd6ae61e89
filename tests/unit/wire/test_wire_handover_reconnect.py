"""A restart in place after a shadow's reconnect keeps the reconnect's connection.

The reconnect's connection belongs to its CA_RECONNECT_JOB command's task in the
command server (serve_ca_command -> ShadowLink.offer, the server closes the connection
when the task ends); the job's conversation (an activation's, also a command's task)
uses it. A restart cancels every command's task at once (CommandServer.close): the
conversation hands its connection over (execd.wire.handover) in its own task, which may
run after the reconnect's. Real encrypted socket pairs, no mocks."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from test_wire_handover import encrypted_pair

from execd.wire.handover import adopt_connection, export_connection, hand_over
from execd.wire.reconnect import ReconnectJob
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import GET_SEC_SESSION_INFO, ShadowSyscalls
from execd.wire.streamed_output import StreamedOutput

CLAIM = "<127.0.0.1:1?addrs=127.0.0.1-1>#1795423816#7#[Encryption=\"YES\";]" + "c" * 64


async def _restart_after_a_reconnect() -> tuple[dict[str, Any] | None, bytes, bytes]:
    ours, old_shadow = await encrypted_pair()
    fresh, new_shadow = await encrypted_pair()  # the CA request read, its Success sent
    calls = ShadowSyscalls(ours)
    link = ShadowLink(ours, claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=600.0,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    calls.attach(link)

    async def reconnect_command() -> None:  # as CommandServer._serve runs the command
        try:
            await link.offer(fresh, ReconnectJob("<shadow2>", "", "vm", "<shadow2>", "1#k"))
        finally:
            await fresh.close()

    records: list[dict[str, Any] | None] = []

    def handover(channel: Any, proxy: Any, streams: Any, transfer: Any) -> bool:
        records.append(export_connection(channel))  # as pool_conversation's handover
        return True

    async def conversation() -> None:  # serve_shadow's ending, cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            hand_over(calls, link, ShadowOptions(handover=handover), None, StreamedOutput({}))
            raise
        finally:
            link.close()

    taken = asyncio.Event()

    async def adopt() -> None:  # the job's conversation takes it (gets its sessions)
        await calls.adopt_reconnect()
        taken.set()

    link.adopt = adopt
    job = asyncio.create_task(conversation())
    command = asyncio.create_task(reconnect_command())
    dec = new_shadow.decoder(await new_shadow.recv())
    assert dec.get_int() == GET_SEC_SESSION_INFO
    enc = new_shadow.encoder().put_int(1)
    for value in ("r", "", "k", "filetrans.r", "", "k"):
        enc.put_string(value)
    await new_shadow.send(enc.payload())
    await taken.wait()  # offer() is at its wait for the connection's release
    assert calls.channel is fresh and calls.idle
    # The restart: CommandServer.close cancels its tasks in its set's order; this one
    # is the order in which the reconnect's task ran first (the pool's run)
    for task in (command, job):
        task.cancel()
    await asyncio.gather(command, job, return_exceptions=True)
    record = records[0]
    adopted = await adopt_connection(record, timeout_s=5) if record is not None else None
    got, answer = b"", b""
    if adopted is not None:  # the next image's first call reaches the new shadow
        await adopted.send(b"next call")
        got = await new_shadow.recv()
        await new_shadow.send(b"its answer")
        answer = await adopted.recv()
        await adopted.close()
    for channel in (ours, old_shadow, new_shadow):
        await channel.close()
    return record, got, answer


def test_a_reconnects_connection_is_handed_over_when_its_command_is_cancelled_first() -> None:
    record, got, answer = asyncio.run(_restart_after_a_reconnect())
    assert record is not None  # not closed by its command's end before the handover
    assert (got, answer) == (b"next call", b"its answer")


async def _restart_while_a_reconnect_waits_at_the_quiesce() -> tuple[Any, bytes, bytes]:
    ours, old_shadow = await encrypted_pair()
    fresh, new_shadow = await encrypted_pair()
    calls = ShadowSyscalls(ours)  # attach: the link's adopt is calls.adopt_reconnect
    link = ShadowLink(ours, claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=600.0,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    calls.attach(link)
    assert await link.quiesce(1.0)  # the restart's quiesce: the gate closed, idle

    async def reconnect_command() -> None:
        try:
            await link.offer(fresh, ReconnectJob("<shadow2>", "", "vm", "<shadow2>", "1#k"))
        finally:
            await fresh.close()

    records: list[dict[str, Any] | None] = []

    def handover(channel: Any, proxy: Any, streams: Any, transfer: Any) -> bool:
        records.append(export_connection(channel))
        return True

    async def conversation() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            hand_over(calls, link, ShadowOptions(handover=handover), None, StreamedOutput({}))
            raise
        finally:
            link.close()

    job = asyncio.create_task(conversation())
    command = asyncio.create_task(reconnect_command())
    # The reconnect closes the old connection, then its adopt waits at the closed gate
    with contextlib.suppress(Exception):
        await old_shadow.recv(timeout_s=5)
    for task in (command, job):  # the reconnect's task first, as in test above
        task.cancel()
    await asyncio.gather(command, job, return_exceptions=True)
    record = records[0]
    adopted = await adopt_connection(record, timeout_s=5) if record is not None else None
    got, answer = b"", b""
    if adopted is not None:  # the connection never used goes on in the next image
        await adopted.send(b"next call")
        got = await new_shadow.recv()
        await new_shadow.send(b"its answer")
        answer = await adopted.recv()
        await adopted.close()
    for channel in (ours, old_shadow, new_shadow):
        await channel.close()
    return record, got, answer


def test_a_reconnect_held_by_the_quiesce_is_handed_over_when_its_command_is_cancelled_first(
        ) -> None:  # fmt: skip
    """A shadow reconnects while the restart quiesces: the reconnect's adopt waits at
    the closed gate, its command is cancelled there; the connection is handed over."""
    record, got, answer = asyncio.run(_restart_while_a_reconnect_waits_at_the_quiesce())
    assert record is not None
    assert (got, answer) == (b"next call", b"its answer")
