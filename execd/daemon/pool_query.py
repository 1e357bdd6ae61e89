"""QUERY_STARTD_ADS sent to execd itself, as condor_startd answers it
(command_query_ads): `condor_who -addr <execd>` and `condor_status -direct <execd>` read
the slots' public ads from the execute point rather than from the collector.

The query ad's Requirements is the constraint (MY = the query, TARGET = a slot ad);
its Projection, a list of attribute names, limits what each ad carries. Each matching
public ad goes out after a 1, a 0 ends the list. Private attributes (claim ids) are
never sent: the ads are the public ones the collector gets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from execd import classads, log
from execd.errors import ExecdError
from execd.wire.classad_codec import decode_ad, encode_ad, public_part, to_classad

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember
    from execd.wire.channel import Channel
    from execd.wire.server import Peer

logger = log.get_logger("pool")


async def query_startd_ads(member: PoolMember, channel: Channel, command: int,
                           peer: Peer) -> None:  # fmt: skip
    query = to_classad(decode_ad(channel.decoder(await channel.recv()), "query ad"))
    requirements = query.lookup("Requirements") if "Requirements" in query else None
    projection = query.get("Projection")
    wanted = {n.strip().lower() for n in projection.replace(",", " ").split()} \
        if isinstance(projection, str) and projection.strip() else None  # fmt: skip
    enc = channel.encoder()
    sent = 0
    for public, _private in member.ad_pairs():
        ad = public_part(public)
        if requirements is not None:
            try:
                matched = classads.is_true(classads.evaluate(requirements, query, to_classad(ad)))
            except ExecdError:
                matched = False
            if not matched:
                continue
        if wanted is not None:
            ad = {k: v for k, v in ad.items() if k.lower() in wanted}
        encode_ad(enc.put_int(1), ad)
        sent += 1
    await channel.send(enc.put_int(0).payload())
    logger.debug("pool_query_answered", user=peer.user, ads=sent)
