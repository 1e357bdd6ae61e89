"""STARTER_UPLOAD_TIMEOUT bounds the wait for the shadow's answer to a call, as
condor_starter's syscall socket timeout (jic_shadow.cpp: param_integer(
"STARTER_UPLOAD_TIMEOUT", 300)): the daemon reads it (pool_conversation) and the
conversation's calls use it (a shadow that stops answering is given up that much
later, then the job lease runs). A real job as nobody, a real socket pair."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from test_shadow_reconnect_job import CLAIM
from test_shadow_resume import started
from wire_pairs import channel_pair

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.pool_conversation import syscall_timeout_s
from execd.errors import ProtocolError
from execd.wire.conversation_record import Conversation
from execd.wire.shadow import ShadowOptions
from execd.wire.shadow_link import ShadowLinks
from execd.wire.shadow_resume import resume_shadow


@pytest.mark.parametrize(("text", "expected"), [
    ("", 300.0), ("STARTER_UPLOAD_TIMEOUT = 600\n", 600.0),
    ("STARTER_UPLOAD_TIMEOUT = 10 * 60\n", 600.0), ("STARTER_UPLOAD_TIMEOUT = 0\n", 300.0),
])  # fmt: skip
def test_the_knob_is_read(text: str, expected: float) -> None:
    assert syscall_timeout_s(load_settings(parse_config_text(text))) == expected


@pytest.mark.skipif(os.geteuid() != 0, reason="jobs run as nobody: needs root")
def test_a_shadow_that_stops_answering_is_given_up_after_the_timeout(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    path, ids = box
    proc = started(path, ids, "sleep 30")

    async def scenario() -> float:
        await proc.start()
        ours, theirs = await channel_pair()
        # a lease of 0.5 s: once the call is given up, no reconnect is waited for long
        state = Conversation("vm#1.0#1", {"ClusterId": "1", "ProcId": "0"}, str(path), [],
                             {}, False, {"Name": '"slot1_1@vm"'}, 0.5, 1795423816)  # fmt: skip
        options = ShadowOptions(update_interval_s=5, links=ShadowLinks(), keep_sandbox=True,
                                syscall_timeout_s=1.0)  # fmt: skip
        began = time.monotonic()
        try:  # the shadow reads get_sec_session_info and never answers
            with pytest.raises(ProtocolError, match="did not reconnect"):
                await asyncio.wait_for(resume_shadow(CLAIM, state, proc, options, ours), 20)
        finally:
            proc.kill()
            await proc.wait(10)
            await ours.close()
            await theirs.close()
        return time.monotonic() - began

    assert 1.0 <= asyncio.run(scenario()) < 10.0  # not the 300 s default
