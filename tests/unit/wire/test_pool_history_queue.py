"""GET_HISTORY's queue (execd/daemon/pool_history.py) over real socket pairs: at most
HISTORY_HELPER_MAX_CONCURRENCY queries are read at once, the next ones wait their turn,
and one more than the waiting room holds gets condor_startd's error 9."""

from __future__ import annotations

import asyncio
from pathlib import Path

from wire_pairs import channel_pair

from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.pool_history import HistoryQueue
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.commands import Command
from execd.wire.server import Peer

QUERY: WireAd = {"HistoryRecordSource": '"STARTD"', "StreamResults": "true"}
PEER = Peer(user="reader@pool", method="FS", sid="s1", address="127.0.0.1:1")
RECORDS = 3000  # more than a socket pair's buffers hold: the first reader waits on its client


def settings(history: Path) -> Settings:
    text = f"HISTORY_HELPER_MAX_CONCURRENCY = 1\nSTARTD_HISTORY = {history}\n"
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


async def ask(queue: HistoryQueue, opened: list[Channel]) -> tuple[Channel, asyncio.Task[None]]:
    """A client's query, served (as the wire server would) on the other end of a pair."""
    client, server = await channel_pair()
    opened += [client, server]
    await client.send(encode_ad(client.encoder(), QUERY).payload())
    return client, asyncio.create_task(queue.serve(server, Command.GET_HISTORY, PEER))


async def read_all(client: Channel) -> list[WireAd]:
    ads: list[WireAd] = []
    while not ads or ads[-1].get("Owner") != "0":
        ads.append(decode_ad(client.decoder(await client.recv())))
    return ads


def test_queries_wait_their_turn_and_one_too_many_gets_error_9(tmp_path: Path) -> None:
    history = tmp_path / "startd_history"
    history.write_text("".join(f'ClusterId = {n}\nCmd = "{"x" * 200}"\n*** Offset = 0\n'
                               for n in range(RECORDS)))  # fmt: skip

    async def scenario() -> None:
        queue = HistoryQueue(lambda: settings(history), max_waiting=1)
        opened: list[Channel] = []
        first, reading = await ask(queue, opened)
        assert decode_ad(first.decoder(await first.recv())) == {
            "Owner": "1", "StreamResults": "true"}  # the first query is being read
        second, waiting = await ask(queue, opened)
        while queue.waiting == 0:  # the second query reaches the queue
            await asyncio.sleep(0)
        third, refused = await ask(queue, opened)
        await refused
        assert decode_ad(third.decoder(await third.recv())) == {
            "Owner": "0", "ErrorCode": "9",
            "ErrorString": '"Cowardly refusing to queue more than 1 requests."'}
        assert not waiting.done()  # still waiting for the first to end
        ads = await read_all(first)
        await reading
        assert len(ads) == RECORDS + 1 and ads[-1]["NumJobMatches"] == str(RECORDS)
        ads = await read_all(second)
        await waiting
        assert ads[0] == {"Owner": "1", "StreamResults": "true"} and len(ads) == RECORDS + 2
        for channel in opened:
            await channel.close()

    asyncio.run(scenario())
