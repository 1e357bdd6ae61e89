"""Signals become queued requests; handlers never run daemon code themselves."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from execd.daemon.signals import CONTRACT, Request, SignalQueue


@pytest.mark.asyncio
@pytest.mark.parametrize("signum", sorted(CONTRACT, key=int))
async def test_each_signal_of_the_contract_is_queued(signum: signal.Signals) -> None:
    loop = asyncio.get_running_loop()
    signals = SignalQueue()
    signals.install(loop)
    try:
        os.kill(os.getpid(), signum)
        request = await asyncio.wait_for(signals.next(), timeout=5)
    finally:
        signals.uninstall(loop)
    assert request is CONTRACT[signum]


@pytest.mark.asyncio
async def test_second_term_turns_graceful_into_fast() -> None:
    loop = asyncio.get_running_loop()
    signals = SignalQueue()
    signals.install(loop)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        first = await asyncio.wait_for(signals.next(), timeout=5)
        os.kill(os.getpid(), signal.SIGINT)
        second = await asyncio.wait_for(signals.next(), timeout=5)
    finally:
        signals.uninstall(loop)
    assert first is Request.SHUTDOWN_GRACEFUL
    assert second is Request.SHUTDOWN_FAST
