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


class Restart:
    """A job's conversation, its old shadow and a reconnect's connection from a new
    one (the CA request read, its Success sent), as the command server runs them."""

    async def start(self) -> None:
        self.ours, self.old_shadow = await encrypted_pair()
        self.fresh, self.new_shadow = await encrypted_pair()
        self.calls = ShadowSyscalls(self.ours)  # attach: the link's adopt is adopt_reconnect
        self.link = ShadowLink(self.ours, claim_id=CLAIM, global_job_id="vm#1.0#1",
                               lease_s=600.0, starter_ad={},
                               starter_address="<127.0.0.1:1>")  # fmt: skip
        self.calls.attach(self.link)
        self.records: list[dict[str, Any] | None] = []

    def run(self) -> tuple[asyncio.Task[None], asyncio.Task[None]]:
        """(the reconnect's command, the job's conversation) as two server tasks, the
        conversation started first (it was activated before the reconnect came)."""
        job = asyncio.create_task(self._conversation())
        return asyncio.create_task(self._reconnect_command()), job

    async def _reconnect_command(self) -> None:  # as CommandServer._serve runs it
        try:
            await self.link.offer(self.fresh,
                                  ReconnectJob("<shadow2>", "", "vm", "<shadow2>", "1#k"))
        finally:
            await self.fresh.close()

    def _handover(self, channel: Any, proxy: Any, streams: Any, transfer: Any) -> bool:
        self.records.append(export_connection(channel))  # as pool_conversation's handover
        return True

    async def _conversation(self) -> None:  # serve_shadow's ending, cancelled
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            hand_over(self.calls, self.link, ShadowOptions(handover=self._handover), None,
                      StreamedOutput({}))  # fmt: skip
            raise
        finally:
            self.link.close()

    async def cancel_and_go_on(self, command: asyncio.Task[None], job: asyncio.Task[None],
                               ) -> tuple[dict[str, Any] | None, bytes, bytes]:  # fmt: skip
        """The restart: CommandServer.close cancels its tasks in its set's order, here the
        reconnect's first (the pool's run); then the next image's first call on what was
        handed over: (the record, what the new shadow got, the answer read back)."""
        for task in (command, job):
            task.cancel()
        await asyncio.gather(command, job, return_exceptions=True)
        record = self.records[0]
        adopted = await adopt_connection(record, timeout_s=5) if record is not None else None
        got, answer = b"", b""
        if adopted is not None:
            await adopted.send(b"next call")
            got = await self.new_shadow.recv()
            await self.new_shadow.send(b"its answer")
            answer = await adopted.recv()
            await adopted.close()
        for channel in (self.ours, self.old_shadow, self.new_shadow):
            await channel.close()
        return record, got, answer


async def _restart_after_a_reconnect() -> tuple[dict[str, Any] | None, bytes, bytes]:
    restart = Restart()
    await restart.start()
    taken = asyncio.Event()

    async def adopt() -> None:  # the job's conversation takes it (gets its sessions)
        await restart.calls.adopt_reconnect()
        taken.set()

    restart.link.adopt = adopt
    command, job = restart.run()
    new_shadow = restart.new_shadow
    dec = new_shadow.decoder(await new_shadow.recv())
    assert dec.get_int() == GET_SEC_SESSION_INFO
    enc = new_shadow.encoder().put_int(1)
    for value in ("r", "", "k", "filetrans.r", "", "k"):
        enc.put_string(value)
    await new_shadow.send(enc.payload())
    await taken.wait()  # offer() is at its wait for the connection's release
    assert restart.calls.channel is restart.fresh and restart.calls.idle
    return await restart.cancel_and_go_on(command, job)


def test_a_reconnects_connection_is_handed_over_when_its_command_is_cancelled_first() -> None:
    record, got, answer = asyncio.run(_restart_after_a_reconnect())
    assert record is not None  # not closed by its command's end before the handover
    assert (got, answer) == (b"next call", b"its answer")


async def _restart_while_a_reconnect_waits_at_the_quiesce() -> tuple[Any, bytes, bytes]:
    restart = Restart()
    await restart.start()
    assert await restart.link.quiesce(1.0)  # the restart's quiesce: the gate closed, idle
    command, job = restart.run()
    # The reconnect closes the old connection, then its adopt waits at the closed gate
    with contextlib.suppress(Exception):
        await restart.old_shadow.recv(timeout_s=5)
    return await restart.cancel_and_go_on(command, job)


def test_a_reconnect_held_by_the_quiesce_is_handed_over_when_its_command_is_cancelled_first(
        ) -> None:  # fmt: skip
    """A shadow reconnects while the restart quiesces: the reconnect's adopt waits at
    the closed gate, its command is cancelled there; the connection is handed over."""
    record, got, answer = asyncio.run(_restart_while_a_reconnect_waits_at_the_quiesce())
    assert record is not None
    assert (got, answer) == (b"next call", b"its answer")
