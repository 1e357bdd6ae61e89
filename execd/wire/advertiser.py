"""Keeps the collector's view of this node's slots current (pool mode, HTCondor's
startd update timer): every slot's public + private ad is sent with UPDATE_STARTD_AD
every UPDATE_INTERVAL and as soon as something changed (`changed()`), slots that
disappeared (a released dynamic slot) are invalidated, and `stop()` invalidates them
all, as a startd does when it shuts down. A `daemon_ad` hook gives the startd's daemon
ad (execd.daemon.startd_daemon_ad) when one is due: it goes after the slot ads, alone,
and stop() invalidates it too, as does the first round after it is turned off (a
reload of ENABLE_STARTD_DAEMON_AD = false), so that no stale copy stays listed.

Every update carries what HTCondor's collector client (DCCollector) adds to both ads:
DaemonStartTime and DaemonLastReconfigTime (`started()`), and UpdateSequenceNumber, one
sequence per ad (by Name, MyType and Machine) that goes up by one at every update sent,
the first being 1. The collector counts UpdatesSequenced, and UpdatesLost where a
number was skipped, from it (a new DaemonStartTime starts a new sequence).

A collector that cannot be reached or refuses an update costs a logged warning
(reason only; ads hold claim ids, so they are never logged) and a retry at the next
round; it never stops the daemon.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from execd.errors import ProtocolError
from execd.log import get_logger
from execd.wire.classad_codec import WireAd, from_values, to_classad
from execd.wire.collector import CollectorClient

log = get_logger("wire")

AdPairs = Sequence[tuple[WireAd, WireAd]]
# The startd's daemon ad to send after this round's slot ads (None: not this round).


class DaemonAdSource(Protocol):
    """The startd's daemon ad: `for_round` gives it when due (None: not now), `enabled`
    says whether one is wanted at all (a reload may turn it off)."""

    def for_round(self, pairs: AdPairs) -> WireAd | None: ...

    def enabled(self) -> bool: ...
START = time.time()  # when this process began, for an advertiser told nothing else


def string_value(text: str) -> str:
    """The string a wire ad's attribute text (a quoted ClassAd string) says."""
    return str(to_classad({"V": text})["V"])


def slot_name(public: WireAd) -> str:
    return string_value(public["Name"])


async def wait_event(event: asyncio.Event, timeout_s: float) -> None:
    """Until `event` is set or `timeout_s` passed. Unlike wait_for() on Python 3.11, a
    cancellation that arrives as the event is set is never lost (a loop that lost it
    would keep its TaskGroup, and the daemon's shutdown, waiting forever)."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout_s)
    finally:
        waiter.cancel()


class Advertiser:
    """One collector's advertiser; run() in a task, changed() on any change, stop()."""

    def __init__(self, collector: CollectorClient, ads: Callable[[], AdPairs], *,
                 interval_s: float,
                 started: Callable[[], tuple[float, float]] = lambda: (START, START),
                 daemon_ad: DaemonAdSource | None = None) -> None:  # fmt: skip
        self.collector = collector
        self.ads = ads
        self.started = started  # (DaemonStartTime, DaemonLastReconfigTime)
        self.sequences: dict[tuple[str, ...], int] = {}  # last UpdateSequenceNumber per ad
        self.interval_s = interval_s
        self.rounds = 0
        self.failures = 0
        self._advertised: set[str] = set()
        self.daemon_ad = daemon_ad
        self._daemon_advertised: tuple[str, str] | None = None  # (Name, MyAddress) sent
        self._wake = asyncio.Event()
        self._round_done = asyncio.Condition()

    def changed(self) -> None:
        """Advertise now (a state change), not at the next interval."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            await self._round()
            await wait_event(self._wake, self.interval_s)

    async def wait_rounds(self, count: int) -> None:
        """Until `count` rounds (successful or not) have finished since start."""
        async with self._round_done:
            await self._round_done.wait_for(lambda: self.rounds >= count)

    async def _round(self) -> None:
        try:
            pairs = list(self.ads())
            names = {slot_name(public) for public, _ in pairs}
            for public, private in pairs:
                self._stamp(public, private)
                await self.collector.update_startd_ad(public, private)
                self._advertised.add(slot_name(public))
            for gone in sorted(self._advertised - names):
                await self.collector.invalidate_startd_ad(gone)
                self._advertised.discard(gone)
            if self.daemon_ad is not None and not self.daemon_ad.enabled():
                await self._invalidate_daemon_ad()  # turned off: gone, not left to go stale
            elif self.daemon_ad is not None and \
                    (daemon := self.daemon_ad.for_round(pairs)) is not None:  # fmt: skip
                self._stamp(daemon, {})
                await self.collector.update_startd_ad(daemon, None)
                self._daemon_advertised = (slot_name(daemon),
                                           string_value(daemon.get("MyAddress", '""')))
        except ProtocolError as exc:
            self.failures += 1
            log.warning("collector_update_failed", collector=str(self.collector.address),
                        reason=str(exc))  # fmt: skip
        finally:
            async with self._round_done:
                self.rounds += 1
                self._round_done.notify_all()

    def _stamp(self, public: WireAd, private: WireAd) -> None:
        started, reconfigured = self.started()
        key = tuple(public.get(attr, "") for attr in ("Name", "MyType", "Machine"))
        sequence = self.sequences[key] = self.sequences.get(key, 0) + 1
        stamps = from_values({"DaemonStartTime": int(started),
                              "DaemonLastReconfigTime": int(reconfigured),
                              "UpdateSequenceNumber": sequence})  # fmt: skip
        public.update(stamps)
        private.update(stamps)

    async def stop(self) -> None:
        """Invalidate every slot this advertiser put in the collector, then disconnect."""
        try:
            for name in sorted(self._advertised):
                try:
                    await self.collector.invalidate_startd_ad(name)
                except ProtocolError as exc:
                    log.warning("collector_invalidate_failed", slot=name, reason=str(exc))
            self._advertised.clear()
            try:
                await self._invalidate_daemon_ad()
            except ProtocolError as exc:
                name = self._daemon_advertised[0] if self._daemon_advertised else ""
                log.warning("collector_invalidate_failed", slot=name, reason=str(exc))
        finally:
            await self.collector.close()

    async def _invalidate_daemon_ad(self) -> None:
        """The daemon ad this advertiser sent, if any, out of the collector."""
        if self._daemon_advertised is not None:
            name, address = self._daemon_advertised
            await self.collector.invalidate_startd_ad(name, "StartD", address)
            self._daemon_advertised = None
            log.info("startd_daemon_ad_invalidated", name=name)
