"""A call that outlives its conversation (execd.wire.shadow_link): shielded from its
caller's cancel (as streamed output's calls are) while it waits for the shadow's
reconnect, it ends when the conversation closes its link, not when the job lease runs
out (2400 s by default) with its error never retrieved."""

from __future__ import annotations

import asyncio

from wire_pairs import channel_pair

from execd.errors import ProtocolError
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink


def test_a_shielded_call_waiting_for_a_reconnect_ends_with_its_conversation() -> None:
    asyncio.run(_shielded_call_outlives_its_caller())


async def _shielded_call_outlives_its_caller() -> None:
    ours, theirs = await channel_pair()
    link = ShadowLink(ours, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j", lease_s=2400.0,
                      starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    await theirs.close()  # the shadow is gone: the update waits for its reconnect
    call = asyncio.ensure_future(calls.register_job_info({}))
    caller = asyncio.ensure_future(asyncio.shield(call))
    await asyncio.wait_for(link.disconnected.wait(), 5)
    caller.cancel()  # the job held, the copy cancelled: the call goes on
    await asyncio.gather(caller, return_exceptions=True)
    assert not call.done()
    link.close()  # the conversation ends
    done, _ = await asyncio.wait({call}, timeout=5)
    assert done == {call}
    error = call.exception()
    assert isinstance(error, ProtocolError) and "the conversation of j ended" in str(error)
    await ours.close()
