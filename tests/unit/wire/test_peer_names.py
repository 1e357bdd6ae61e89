"""The peer's host names for ALLOW_/DENY_ host name patterns (execd.wire.peer_names):
a PTR name counts only when it resolves forward to the peer again; lookups run off the
event loop within a time limit; failures are not kept; the cache is bounded."""

from __future__ import annotations

import asyncio
import threading

import pytest

from execd.wire.peer_names import PeerNames, confirmed_names


def test_a_ptr_name_counts_only_if_it_resolves_forward_to_the_peer() -> None:
    """The probe: mallory controls the PTR of 203.0.113.9 and says cm.example.org."""
    forward = {"cm.example.org": ["192.0.2.1"], "mal.example.net": ["203.0.113.9"]}

    def reverse(ip: str) -> tuple[str, list[str], list[str]]:
        return "cm.example.org", ["mal.example.net", "gone.example.org"], [ip]

    def resolve(name: str) -> list[str]:
        if name not in forward:
            raise OSError("Name or service not known")
        return forward[name]

    assert confirmed_names("203.0.113.9", resolve, reverse) == ["mal.example.net"]


def test_localhost_is_confirmed_by_the_real_resolver() -> None:
    assert "localhost" in confirmed_names("127.0.0.1")


@pytest.mark.asyncio
async def test_text_that_is_no_ip_address_is_never_looked_up() -> None:
    asked: list[str] = []
    names = PeerNames(lambda ip: asked.append(ip) or ["x"])
    assert await names.of("(claim)") == ()
    assert await names.of("1:2:3:4:5:6:7:8:4660") == ()  # 9 groups: not an address
    assert asked == []


@pytest.mark.asyncio
async def test_a_failed_lookup_is_not_kept() -> None:
    answers: list[list[str] | OSError] = [OSError("SERVFAIL"), ["w3.example.org"]]

    def lookup(ip: str) -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    names = PeerNames(lookup)
    assert await names.of("10.1.2.3") == ()
    assert await names.of("10.1.2.3") == ("w3.example.org",)
    assert await names.of("10.1.2.3") == ("w3.example.org",)  # now kept
    assert answers == []


@pytest.mark.asyncio
async def test_the_cache_holds_a_bounded_number_of_addresses_for_a_while() -> None:
    now = [0.0]
    names = PeerNames(lambda ip: [f"h{ip}"], size=2, clock=lambda: now[0])
    for ip in ("2001:db8::1", "2001:db8::2", "2001:db8::3"):
        await names.of(ip)
    assert list(names.cache) == ["2001:db8::2", "2001:db8::3"]
    now[0] = 10_000.0  # past the time they are kept for
    names.lookup = lambda ip: ["renamed"]
    assert await names.of("2001:db8::3") == ("renamed",)


@pytest.mark.asyncio
async def test_a_slow_lookup_times_out_without_stalling_the_loop() -> None:
    release = threading.Event()

    def stuck(ip: str) -> list[str]:
        release.wait(10)
        return ["late.example.org"]

    names = PeerNames(stuck, timeout_s=0.2)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    try:
        assert await names.of("198.51.100.7") == ()
    finally:
        task.cancel()
        release.set()
    assert ticks > 5  # the loop ran while the resolver hung
    assert "198.51.100.7" not in names.cache
