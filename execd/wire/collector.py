"""A client of the HTCondor collector: advertise, invalidate and query startd ads.

UPDATE_STARTD_AD: one message holding the public slot ad (private attributes left out)
and then the private ad (Name, MyAddress, ClaimId/Capability, ...). The collector keeps
the TCP connection as an open command socket, so later updates on it are just
int UPDATE_STARTD_AD + both ads in one encrypted message, no new handshake
(HTCondor's DCCollector::sendTCPUpdate). A connection the collector dropped is
replaced by a new one, resuming the cached security session.

A startd's daemon ad (MyType "StartD") goes with UPDATE_STARTD_AD too, alone: the
collector reads no private ad after it (CollectorEngine::collect).

INVALIDATE_STARTD_ADS: a query ad naming the slot (TargetType "StartD": the daemon
ad); QUERY_STARTD_ADS: a query ad, then the collector streams (int 1, ad)... int 0.
"""

from __future__ import annotations

from collections.abc import Mapping

from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values
from execd.wire.commands import Command
from execd.wire.encoding import Encoder
from execd.wire.security import ClientSecurity, SessionNotFoundError, connect, start_command
from execd.wire.session import Session
from execd.wire.sinful import Sinful

# A query that lists more ads than this is refused (a broken collector cannot make
# execd read forever).
MAX_QUERY_ADS = 100_000


async def open_command(address: Sinful, command: int,
                       security: ClientSecurity) -> tuple[Channel, Session]:  # fmt: skip
    """Connect and authenticate for `command`; a forgotten session is retried once fresh."""
    for attempt in (1, 2):
        channel = await connect(address, timeout_s=security.timeout_s)
        try:
            return channel, await start_command(channel, address, command, security)
        except SessionNotFoundError:
            await channel.close()
            if attempt == 2:
                raise
        except BaseException:
            await channel.close()
            raise
    raise AssertionError("unreachable")  # pragma: no cover


def _ads_payload(enc: Encoder, public: Mapping[str, str],
                 private: Mapping[str, str] | None) -> bytes:  # fmt: skip
    encode_ad(enc, public, exclude_private=True)
    if private is not None:
        encode_ad(enc, private)
    return enc.payload()


def query_ad(target_type: str, constraint: str = "true") -> WireAd:
    ad = from_values({"MyType": "Query", "TargetType": target_type})
    ad["Requirements"] = constraint
    return ad


class CollectorClient:
    """One collector; holds the kept-open update connection. close() when done."""

    def __init__(self, address: Sinful, security: ClientSecurity) -> None:
        self.address = address
        self.security = security
        self.version = ""  # the collector's CondorVersion, once an update session says it
        self._update: Channel | None = None

    @property
    def update_connection(self) -> Channel | None:
        """The kept-open connection updates travel on (None before the first)."""
        return self._update

    async def update_startd_ad(self, public: Mapping[str, str],
                               private: Mapping[str, str] | None) -> None:  # fmt: skip
        """Advertise one slot: its public ad and its private ad; or, without a private
        ad, the startd's daemon ad (MyType StartD), which the collector takes alone."""
        if self._update is not None and not self._update.reader.at_eof():
            enc = self._update.encoder().put_int(Command.UPDATE_STARTD_AD)
            try:
                await self._update.send(_ads_payload(enc, public, private))
                return
            except RemoteProtocolError:
                await self._drop_update_channel()
        await self._drop_update_channel()
        channel, session = await open_command(self.address, Command.UPDATE_STARTD_AD,
                                              self.security)  # fmt: skip
        self.version = session.remote_version
        try:
            await channel.send(_ads_payload(channel.encoder(), public, private))
        except BaseException:
            await channel.close()
            raise
        self._update = channel

    async def invalidate_startd_ad(self, name: str, target_type: str = "Machine",
                                   address: str | None = None) -> None:  # fmt: skip
        """Remove the slot ad (public and private) named `name`; with target_type
        "StartD", the daemon ad of that name (condor_startd sends its MyAddress too)."""
        ad = query_ad(target_type, f"TARGET.Name == {from_values({'N': name})['N']}")
        ad["Name"] = from_values({"N": name})["N"]
        if address is not None:
            ad["MyAddress"] = from_values({"A": address})["A"]
        channel, _ = await open_command(self.address, Command.INVALIDATE_STARTD_ADS,
                                        self.security)  # fmt: skip
        try:
            await channel.send(encode_ad(channel.encoder(), ad).payload())
        finally:
            await channel.close()

    async def query_startd_ads(self, constraint: str = "true") -> list[WireAd]:
        """The slot ads the collector holds that match `constraint` (ClassAd text)."""
        return await self.query(Command.QUERY_STARTD_ADS, "Machine", constraint)

    async def query(self, command: int, target_type: str, constraint: str = "true") -> list[WireAd]:
        """Any QUERY_* command: the ads of `target_type` that match `constraint`."""
        channel, _ = await open_command(self.address, command, self.security)
        try:
            await channel.send(encode_ad(channel.encoder(), query_ad(target_type, constraint))
                               .payload())  # fmt: skip
            dec = channel.decoder(await channel.recv())
            ads: list[WireAd] = []
            while dec.get_int("more-ads flag"):
                if len(ads) >= MAX_QUERY_ADS:
                    raise RemoteProtocolError(f"{channel.peer} sent over {MAX_QUERY_ADS} ads")
                ads.append(decode_ad(dec, f"query result {len(ads)}"))
            dec.finish("query result message")
            return ads
        finally:
            await channel.close()

    async def _drop_update_channel(self) -> None:
        if self._update is not None:
            channel, self._update = self._update, None
            await channel.close()

    async def close(self) -> None:
        await self._drop_update_channel()
