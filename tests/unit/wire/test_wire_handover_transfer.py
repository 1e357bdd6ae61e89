"""After a reconnect the output goes to the new shadow's transfer socket, also across a
restart in place: the endpoint a reconnect brought (ShadowLink.offer; the job ad still
names the first shadow's, gone with its schedd) is handed over with the conversation
(execd.wire.handover.hand_over -> the store's record, execd.daemon.pool_conversation)
and the resumed conversation (execd.wire.shadow_resume) sends its output there. Real
socket pairs, real listeners, a real job as nobody."""

from __future__ import annotations

import asyncio
import os
import types
from pathlib import Path
from typing import Any

import pytest
from test_shadow_reconnect_job import CLAIM, shadow
from test_shadow_resume import started
from wire_pairs import channel_pair

from execd.daemon.pool_conversation import handover_record, split_handover
from execd.errors import ProtocolError
from execd.wire.conversation_record import Conversation
from execd.wire.handover import hand_over
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink, ShadowLinks
from execd.wire.shadow_resume import resume_shadow
from execd.wire.streamed_output import StreamedOutput

OLD = ("<10.0.0.1:9618?sock=shadow_1>", "1#old-key")  # the job ad's: the first shadow's
NEW = ("<10.0.0.2:9618?sock=shadow_2>", "2#new-key")  # the reconnected shadow's


def _handed_over_after_a_reconnect(take: bool) -> tuple[str, str] | None:
    """A reconnect with a new transfer endpoint, taken by a call (`take`) or not yet,
    then the conversation handed over: the endpoint the next image reads back."""
    async def scenario() -> tuple[str, str] | None:
        ours, old = await channel_pair()
        fresh, new = await channel_pair()
        link = ShadowLink(ours, claim_id=CLAIM, global_job_id="j", lease_s=600.0,
                          starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
        calls = ShadowFileCalls(ours)
        calls.attach(link)
        request = types.SimpleNamespace(transfer_socket=NEW[0], transfer_key=NEW[1])
        offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
        await asyncio.sleep(0)  # offer() runs to its close of the old connection
        if take:
            assert link.take_offered() is fresh
        records: list[dict[str, Any] | None] = []

        def handover(channel: Any, proxy: Any, streams: Any, transfer: Any) -> bool:
            records.append(handover_record(None, None, streams, transfer))
            return True

        assert hand_over(calls, link, ShadowOptions(handover=handover), None,
                         StreamedOutput({}))  # fmt: skip
        link.close()
        offered.cancel()
        await asyncio.gather(offered, return_exceptions=True)
        for channel in (ours, old, fresh, new):
            await channel.close()
        return split_handover(records[0])[3]

    return asyncio.run(scenario())


def test_a_reconnects_transfer_endpoint_is_handed_over() -> None:
    assert _handed_over_after_a_reconnect(take=True) == NEW


def test_a_reconnect_not_taken_yet_hands_its_transfer_endpoint_over() -> None:
    assert _handed_over_after_a_reconnect(take=False) == NEW


def test_no_reconnect_no_endpoint_in_the_record() -> None:
    assert split_handover(handover_record(None, None, None, None)) == (None,) * 4
    assert split_handover({"fd": 3, "transfer": "junk"})[3] is None


async def _listener(seen: list[str], name: str) -> asyncio.Server:
    async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(name)  # a transfer came here; then nothing answers it
        writer.close()

    return await asyncio.start_server(accepted, "127.0.0.1", 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as nobody: needs root")
def test_the_resumed_conversation_sends_its_output_to_the_handed_over_endpoint(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    proc = started(path, ids, "echo out > result.txt; exit 0")

    async def scenario() -> list[str]:
        seen: list[str] = []
        old_server, new_server = await _listener(seen, "old"), await _listener(seen, "new")
        old_port = old_server.sockets[0].getsockname()[1]
        new_port = new_server.sockets[0].getsockname()[1]
        job_wire = {"ClusterId": "1", "ProcId": "0",
                    "TransferSocket": f'"<127.0.0.1:{old_port}>"', "TransferKey": '"1#old"'}
        state = Conversation("vm#1.0#1", job_wire, str(path), [], {}, True,
                             {"Name": '"slot1_1@vm"'}, 30.0, 1795423816)  # fmt: skip
        record = handover_record(None, None, None, (f"<127.0.0.1:{new_port}>", "2#new"))
        _, _, _, transfer = split_handover(record)
        await proc.start()
        ours, theirs = await channel_pair()
        peer = asyncio.create_task(shadow(theirs, [], asyncio.Event()))
        options = ShadowOptions(update_interval_s=0.2, links=ShadowLinks(), keep_sandbox=True)
        try:
            with pytest.raises(ProtocolError):  # the listener answers nothing
                await asyncio.wait_for(resume_shadow(CLAIM, state, proc, options, ours,
                                                     transfer=transfer), 20)  # fmt: skip
        finally:
            peer.cancel()
            await asyncio.gather(peer, return_exceptions=True)
            await ours.close()
            await theirs.close()
            for server in (old_server, new_server):
                server.close()
                await server.wait_closed()
        return seen

    assert asyncio.run(scenario()) == ["new"]  # not the first shadow's (the job ad's)
