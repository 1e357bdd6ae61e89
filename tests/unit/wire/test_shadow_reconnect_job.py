"""A running job outlives its shadow (real processes as nobody, real socket pairs):
the shadow's connection closes mid-job, the job keeps running, a reconnect's
connection takes over (get_sec_session_info first, then the job's updates) and the
job's exit reaches the new shadow; without a reconnect the job lease runs out and the
job is killed."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from wire_pairs import channel_pair

from execd.errors import ProtocolError
from execd.wire.channel import Channel
from execd.wire.reconnect import ReconnectJob
from execd.wire.shadow import ShadowOptions, _run_job
from execd.wire.shadow_job import JobExit, JobProcess
from execd.wire.shadow_link import ShadowLink
from execd.wire.shadow_syscalls import GET_SEC_SESSION_INFO, REGISTER_JOB_INFO, ShadowSyscalls

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as nobody: needs root")
CLAIM = "<127.0.0.1:1?addrs=127.0.0.1-1>#1795423816#7#[Encryption=\"YES\";]" + "c" * 64


async def shadow(channel: Channel, calls: list[int], seen: asyncio.Event,
                 hang_up_after: int | None = None) -> None:  # fmt: skip
    """Answers every call (the sessions with six strings); closes after N calls."""
    while hang_up_after is None or len(calls) < hang_up_after:
        dec = channel.decoder(await channel.recv(timeout_s=30))
        number = dec.get_int()
        calls.append(number)
        seen.set()
        enc = channel.encoder().put_int(0 if number != GET_SEC_SESSION_INFO else 1)
        if number == GET_SEC_SESSION_INFO:
            for value in ("r", "", "k", "filetrans.r", "", "k"):
                enc.put_string(value)
        await channel.send(enc.payload())
    await channel.close()


def linked(channel: Channel, lease_s: float) -> tuple[ShadowSyscalls, ShadowLink]:
    calls = ShadowSyscalls(channel)
    link = ShadowLink(channel, claim_id=CLAIM, global_job_id="vm#1.0#1", lease_s=lease_s,
                      starter_ad={}, starter_address="<127.0.0.1:1>")  # fmt: skip
    calls.attach(link)
    return calls, link


def test_the_job_survives_its_shadow_and_reports_to_the_new_one(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    # The job goes on well after the old shadow hung up (its second call).
    script = "sleep 1; echo still here > later.txt; exit 7"
    proc = JobProcess(["/bin/sh", "-c", script], path, {"PATH": "/bin:/usr/bin"}, ids, None)

    async def scenario() -> tuple[JobExit, list[int], list[int]]:
        ours, theirs = await channel_pair()
        calls, link = linked(ours, lease_s=30)
        old_calls: list[int] = []
        old = asyncio.create_task(shadow(theirs, old_calls, asyncio.Event(), hang_up_after=2))
        job = asyncio.create_task(_run_job(calls, proc, ShadowOptions(update_interval_s=0.2)))
        await old  # the old shadow is gone; the job runs on
        await link.disconnected.wait()  # its next update found the connection lost
        new_ours, new_theirs = await channel_pair()
        new_calls: list[int] = []
        new = asyncio.create_task(shadow(new_theirs, new_calls, asyncio.Event()))
        handler = asyncio.create_task(link.offer(new_ours, ReconnectJob(
            "<shadow2>", "", "vm", "<shadow2>", "1#key2")))  # fmt: skip
        done = await job
        link.close()
        await handler
        new.cancel()
        for ch in (ours, new_ours, new_theirs):
            await ch.close()
        return done, old_calls, new_calls

    done, old_calls, new_calls = asyncio.run(scenario())
    assert done.exit_ad()["ExitCode"] == "7"
    assert (path / "later.txt").read_text() == "still here\n"
    assert old_calls[1] == REGISTER_JOB_INFO
    assert new_calls[0] == GET_SEC_SESSION_INFO and REGISTER_JOB_INFO in new_calls[1:]


def test_a_shadow_that_never_comes_back_costs_the_job_after_its_lease(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    proc = JobProcess(["/bin/sh", "-c", "sleep 60"], path, {"PATH": "/bin"}, ids, None)

    async def scenario() -> int:
        ours, theirs = await channel_pair()
        calls, _ = linked(ours, lease_s=0.5)
        old = asyncio.create_task(shadow(theirs, [], asyncio.Event(), hang_up_after=2))
        with pytest.raises(ProtocolError, match=r"did not reconnect within the job lease"):
            await _run_job(calls, proc, ShadowOptions(update_interval_s=0.2))
        await old
        await ours.close()
        assert proc.proc is not None
        return await proc.proc.wait()

    assert asyncio.run(scenario()) == -9  # killed, not left running
