"""The starter's syscalls to the shadow, pinned byte for byte against job1.pcap: the
activation socket of a job HTCondor's own starter ran, decrypted with the claim's key.
Each call execd makes sends exactly the real starter's message, and decodes the real
shadow's answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from wire_captures import Replay, decrypt_conversation, stream

from execd.wire.claim_session import claim_session
from execd.wire.classad_codec import decode_ad, decode_ad_lines, encode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.framing import unframe_plain
from execd.wire.shadow_syscalls import JOB_EXITED, ShadowSyscalls, SyscallError

SHADOW, STARTD = 1163, 2673  # the shadow's ACTIVATE_CLAIM connection in job1.pcap


def real_claim_key() -> bytes:
    message = unframe_plain(stream("job1.pcap", 30715, 9819))[1]
    return claim_session(to_classad(decode_ad(Decoder(message)))["ClaimId"]).key


def activation() -> tuple[list[bytes], list[bytes]]:
    """(starter's messages, shadow's messages): the startd's OK and ACTIVATE_CLAIM left out."""
    shadow, starter = decrypt_conversation("job1.pcap", SHADOW, STARTD, real_claim_key())
    return starter[1:], shadow[1:]


def _ad_of(message: bytes, skip_ints: int = 1) -> list[tuple[str, str]]:
    dec = Decoder(message, encrypted=True)
    for _ in range(skip_ints):
        dec.get_int()
    return decode_ad_lines(dec)


def _run(coro: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(coro())


def test_the_real_starters_calls_in_order() -> None:
    starter, shadow = activation()
    numbers = [Decoder(m, encrypted=True).get_int() for m in starter]
    # get_job_info, register_starter_info, get_sec_session_info, register_job_info,
    # request_guidance x2 (execd does not ask), begin_execution, register_job_info,
    # event_notification, register_job_info x2, job_exit.
    assert numbers == [-63, -77, 288, -81, 305, 305, -78, -81, 304, -81, -81, -65]
    assert len(shadow) == len(starter)


def test_each_call_sends_the_real_bytes_and_decodes_the_real_answer() -> None:
    starter, shadow = activation()
    keep = [i for i in range(len(starter)) if i not in (4, 5)]  # no request_guidance
    script = [(k, m) for i in keep for k, m in (("send", starter[i]), ("recv", shadow[i]))]
    replay = Replay(script)
    calls = ShadowSyscalls(replay)
    seen: dict[str, Any] = {}

    async def conversation() -> None:
        job = to_classad(await calls.get_job_info())
        seen["job"] = job
        await calls.register_starter_info(_ad_of(starter[1]))
        seen["sessions"] = await calls.get_sec_session_info()
        await calls.register_job_info(_ad_of(starter[3]))
        await calls.begin_execution()
        await calls.register_job_info(_ad_of(starter[7]))
        seen["event"] = await calls.event_notification(_ad_of(starter[8]))
        await calls.register_job_info(_ad_of(starter[9]))
        await calls.register_job_info(_ad_of(starter[10]))
        dec = Decoder(starter[11], encrypted=True)
        dec.get_int()
        status, reason = dec.get_int(), dec.get_int()
        seen["exit"] = (status, reason)
        await calls.job_exit(status, reason, decode_ad_lines(dec))

    _run(conversation)
    assert not replay.script  # the whole capture was used
    job = seen["job"]
    assert (job["Cmd"], job["Args"], job["Out"]) == ("/bin/echo", "hi", "out.txt")
    assert job["TransferSocket"].endswith("sock=shadow_32250_cad9_3>")
    assert job["TransferKey"] == "1#6b02cc24fd556f9283444d1"
    sessions = seen["sessions"]
    assert sessions.filetrans_id == "filetrans." + sessions.reconnect_id
    assert sessions.reconnect_id.endswith("#1795345264#5")
    assert len(sessions.filetrans_key) == 64 and sessions.filetrans_key not in repr(sessions)
    assert seen["event"] == -3  # the shadow's answer to ActivationExecutionExit
    assert seen["exit"] == (0, JOB_EXITED)


def test_a_failed_call_names_rval_and_errno() -> None:
    answer = Encoder(encrypted=True).put_int(-1).put_int(13).payload()
    request = Encoder(encrypted=True).put_int(-78).payload()
    calls = ShadowSyscalls(Replay([("send", request), ("recv", answer)]))
    with pytest.raises(SyscallError, match="begin_execution: rval -1, errno 13"):
        asyncio.run(calls.begin_execution())


def test_ulog_expects_no_answer() -> None:
    ad = {"MyType": '"RemoteErrorEvent"', "HoldReasonCode": "13"}
    payload = Encoder(encrypted=True).put_int(284)
    replay = Replay([("send", encode_ad(payload, ad).payload())])
    asyncio.run(ShadowSyscalls(replay).ulog(ad))
    assert not replay.script
