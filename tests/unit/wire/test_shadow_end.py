"""The conversation's end (execd.wire.shadow_end.conclude) against a scripted shadow
over a real socket pair: what the exit update and job_exit carry."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_shadow_reconnect_job import linked
from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.classad_codec import decode_ad
from execd.wire.conversation_record import Conversation
from execd.wire.job_runner import JobExit
from execd.wire.shadow_end import conclude
from execd.wire.shadow_syscalls import EVENT_NOTIFICATION, JOB_EXIT, REGISTER_JOB_INFO
from execd.wire.shadow_transfers import Transfers

Ads = dict[int, dict[str, str]]


async def scripted_shadow(channel: Channel, ads: Ads) -> None:
    """Answers rval 0 to each call; keeps the ad of each update, event and job_exit."""
    while True:
        dec = channel.decoder(await channel.recv(timeout_s=30))
        number = dec.get_int()
        if number == JOB_EXIT:
            dec.get_int()  # status
            dec.get_int()  # reason
        if number in (JOB_EXIT, REGISTER_JOB_INFO, EVENT_NOTIFICATION):
            ads[number] = decode_ad(dec)
        await channel.send(channel.encoder().put_int(0).payload())


def concluded(sandbox: Path, usage: dict[str, str]) -> tuple[Ads, list[dict[str, str]]]:
    state = Conversation("vm#1.0#1", {"ClusterId": "1", "ProcId": "0"}, str(sandbox), [],
                         {}, False, {}, 30.0, 1795423816)  # fmt: skip
    updates: list[dict[str, str]] = []

    async def scenario() -> Ads:
        ours, theirs = await channel_pair()
        ads: Ads = {}
        peer = asyncio.create_task(scripted_shadow(theirs, ads))
        calls, link = linked(ours, 30.0)
        transfers = Transfers(calls, link, state.job_wire, "<127.0.0.1:1>")
        await conclude(calls, transfers, state, JobExit(3 << 8, 1.0), updates.append,
                       usage=usage)  # fmt: skip
        peer.cancel()
        await ours.close()
        await theirs.close()
        return ads

    return asyncio.run(scenario()), updates


def test_the_exit_update_and_job_exit_say_exited_with_the_last_usage(tmp_path: Path) -> None:
    # the periodic update's values, as the daemon passes them in
    usage = {"JobState": '"Running"', "ResidentSetSize": "2048", "DiskUsage": "12",
             "StdoutMtime": "1700000005", "JobPid": "4242"}  # fmt: skip
    ads, updates = concluded(tmp_path, usage)
    exit_update, job_exit = ads[REGISTER_JOB_INFO], ads[JOB_EXIT]
    for ad in (exit_update, job_exit, updates[0]):  # the shadow's and the startd's
        assert ad["JobState"] == '"Exited"'  # as condor_starter's OsProc::PublishUpdateAd
        assert ad["ExitCode"] == "3" and ad["ExitBySignal"] == "false"
        assert {k: ad[k] for k in ("ResidentSetSize", "DiskUsage", "StdoutMtime")} == {
            "ResidentSetSize": "2048", "DiskUsage": "12", "StdoutMtime": "1700000005"}
    assert exit_update["_condor_JOBINFO_MAXINTERVAL"] == "-1"  # the final update
    assert "SpooledOutputFiles" not in job_exit  # no file transfer, none sent
