"""GET_HISTORY's queue (execd/daemon/pool_history.py) over real socket pairs: a few
queries are read at once, the next ones wait their turn (handed straight to them), one
more than the waiting room holds gets condor_startd's error 9, waiting and the whole
query have deadlines, a long scan gives the event loop a turn every few ms, and an
answer without StreamResults is one message sent as it is built."""

from __future__ import annotations

import asyncio
import socket
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

from wire_pairs import channel_pair

from execd.config.loader import parse_config_text
from execd.config.settings import Settings, load_settings
from execd.daemon.pool_history import MAX_WAITING, SCANS_AT_ONCE, HistoryQueue
from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.commands import Command
from execd.wire.server import Peer

QUERY: WireAd = {"HistoryRecordSource": '"STARTD"', "StreamResults": "true"}
PEER = Peer(user="reader@pool", method="FS", sid="s1", address="127.0.0.1:1")
RECORD_BYTES = 250


def settings(history: Path | None, concurrency: int = 1) -> Settings:
    text = f"HISTORY_HELPER_MAX_CONCURRENCY = {concurrency}\nSTARTD_HISTORY = {history or ''}\n"
    return load_settings(parse_config_text(text, filename="execd.conf", env={}))


def write_history(path: Path, records: int) -> None:
    path.write_text("".join(f'ClusterId = {n}\nCmd = "{"x" * 200}"\n*** Offset = 0\n'
                            for n in range(records)))  # fmt: skip


def records_past_buffers() -> int:
    """Records enough to fill a socket pair's buffers both ways (and more), so that a
    reader whose client reads nothing stays in the middle of its scan."""
    a, b = socket.socketpair()
    sizes = a.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) + \
        b.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)  # fmt: skip
    a.close()
    b.close()
    return 4 * sizes // RECORD_BYTES


async def ask(queue: HistoryQueue, opened: list[Channel],
              query: WireAd = QUERY) -> tuple[Channel, asyncio.Task[None]]:  # fmt: skip
    """A client's query, served (as the wire server would) on the other end of a pair."""
    client, server = await channel_pair()
    opened += [client, server]
    await client.send(encode_ad(client.encoder(), query).payload())
    return client, asyncio.create_task(queue.serve(server, Command.GET_HISTORY, PEER))


async def read_all(client: Channel) -> list[WireAd]:
    """A streamed answer: one ad a message through the final one."""
    ads: list[WireAd] = []
    while not ads or ads[-1].get("Owner") != "0":
        ads.append(decode_ad(client.decoder(await client.recv())))
    return ads


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0)


def run(scenario: Callable[[list[Channel]], Awaitable[None]]) -> None:
    async def main() -> None:
        opened: list[Channel] = []
        try:
            await scenario(opened)
        finally:
            for channel in opened:
                await channel.close()

    asyncio.run(main())


def test_queries_wait_their_turn_and_one_too_many_gets_error_9(tmp_path: Path) -> None:
    history = tmp_path / "startd_history"
    records = records_past_buffers()
    write_history(history, records)

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: settings(history), max_waiting=1)
        first, reading = await ask(queue, opened)
        assert decode_ad(first.decoder(await first.recv())) == {
            "Owner": "1", "StreamResults": "true"}  # the first query is being read
        second, waiting = await ask(queue, opened)
        await until(lambda: queue.waiting == 1)  # the second query reaches the queue
        third, refused = await ask(queue, opened)
        await refused
        assert decode_ad(third.decoder(await third.recv())) == {
            "Owner": "0", "ErrorCode": "9",
            "ErrorString": '"Cowardly refusing to queue more than 1 requests."'}
        assert not waiting.done()  # still waiting for the first to end
        ads = await read_all(first)
        await reading
        assert len(ads) == records + 1 and ads[-1]["NumJobMatches"] == str(records)
        # The turn went straight to the second: a query arriving before it ran waits.
        fourth, after = await ask(queue, opened)
        await until(lambda: queue.waiting == 1)
        assert queue.reading == 1
        ads = await read_all(second)
        await waiting
        assert ads[0] == {"Owner": "1", "StreamResults": "true"} and len(ads) == records + 2
        assert len(await read_all(fourth)) == records + 2
        await after

    run(scenario)


def test_the_waiting_room_is_small_and_full_is_error_9_before_an_undefined_knob(
        tmp_path: Path) -> None:  # fmt: skip
    """condor_startd checks its queue before the knob (history_queue.cpp); execd's room
    is MAX_WAITING, far below the wire server's 256 connections."""
    history = tmp_path / "startd_history"
    write_history(history, records_past_buffers())
    current = {"settings": settings(history)}

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: current["settings"])
        first, reading = await ask(queue, opened)
        await first.recv()
        waiters = [(await ask(queue, opened))[1] for _ in range(MAX_WAITING)]
        await until(lambda: queue.waiting == MAX_WAITING)
        current["settings"] = settings(None)  # STARTD_HISTORY undefined from now on
        late, refused = await ask(queue, opened)
        await refused
        assert decode_ad(late.decoder(await late.recv()))["ErrorCode"] == "9"
        for task in (reading, *waiters):
            task.cancel()
        await asyncio.gather(reading, *waiters, return_exceptions=True)
        assert (queue.reading, queue.waiting) == (0, 0)  # cancelled ones gave their turns up

    assert MAX_WAITING <= 32
    run(scenario)


def test_a_long_wait_is_error_9_and_a_slow_reader_is_ended_at_the_deadline(
        tmp_path: Path) -> None:  # fmt: skip
    history = tmp_path / "startd_history"
    records = records_past_buffers()
    write_history(history, records)

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: settings(history), wait_deadline_s=0.2,
                             query_deadline_s=1.0)  # fmt: skip
        slow, reading = await ask(queue, opened)  # a client that does not read on
        await slow.recv()
        waiter, waiting = await ask(queue, opened)
        await waiting
        assert decode_ad(waiter.decoder(await waiter.recv())) == {
            "Owner": "0", "ErrorCode": "9",
            "ErrorString": '"Waited 0.2 s for one of the 1 history reads to end."'}
        async with asyncio.timeout(5):
            await reading  # ended at its deadline, not when the client reads
        assert (queue.reading, queue.waiting) == (0, 0)
        ads: list[WireAd] = []  # the slow client gets what was sent, then the end
        try:
            while True:
                ads.append(decode_ad(slow.decoder(await slow.recv())))
        except RemoteProtocolError:
            pass
        assert 0 < len(ads) < records and all(ad.get("Owner") != "0" for ad in ads)
        after, served = await ask(queue, opened)  # the turn was given back
        assert len(await read_all(after)) == records + 2
        await served

    run(scenario)


def test_scans_give_the_loop_a_turn_every_few_ms(tmp_path: Path) -> None:
    """Five queries read one file at once (whole ads of 100 attributes, as `-l`, in
    one message each: no send makes them wait); a task that wants the loop every
    millisecond never waits 100 ms (bench_history_stall measures the gap: below 20 ms;
    200 records between turns made it 500 ms)."""
    history = tmp_path / "startd_history"
    attributes = "".join(f'Attr{i} = "{"v" * 20}"\n' for i in range(99))
    history.write_text("".join(f"ClusterId = {n}\n{attributes}*** Offset = 0\n"
                               for n in range(600)))  # fmt: skip

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: settings(history, concurrency=50))
        asked = [await ask(queue, opened, {"HistoryRecordSource": '"STARTD"'})
                 for _ in range(5)]  # fmt: skip
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.001)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        messages = await asyncio.gather(*(client.recv(30) for client, _task in asked))
        ticking.cancel()
        for message, (client, _task) in zip(messages, asked, strict=True):
            dec = client.decoder(message)
            assert [decode_ad(dec) for _ in range(601)][-1]["AdCount"] == "600"
        assert max(gaps) < 0.1, max(gaps)

    assert SCANS_AT_ONCE <= 4
    run(scenario)


def test_an_answer_without_streaming_is_one_message_never_held_whole(tmp_path: Path) -> None:
    history = tmp_path / "startd_history"
    records = 20000  # a 5 MB answer
    write_history(history, records)

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: settings(history))
        tracemalloc.start()
        client, task = await ask(queue, opened, {"HistoryRecordSource": '"STARTD"'})
        message = await client.recv()
        await task
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        dec = client.decoder(message)
        ads = [decode_ad(dec) for _ in range(records + 1)]
        assert dec.at_end()
        assert ads[0]["ClusterId"] == str(records - 1) and ads[-1]["AdCount"] == str(records)
        # the client holds the whole message (5 MB, and its packets); the server at most
        # a buffer of it: before, its copies alone were 4 times the message
        assert peak < 3 * len(message), (peak, len(message))

    run(scenario)


def test_a_backup_gone_during_the_scan_is_skipped_and_the_answer_ends(tmp_path: Path) -> None:
    history = tmp_path / "startd_history"
    records = records_past_buffers()
    write_history(history, records)
    backup = tmp_path / "startd_history.20250101T000000"
    write_history(backup, 3)

    async def scenario(opened: list[Channel]) -> None:
        queue = HistoryQueue(lambda: settings(history))
        client, task = await ask(queue, opened)
        await client.recv()  # the current file is being read; the backup is listed
        backup.unlink()  # rotated away
        ads = await read_all(client)
        await task
        assert ads[-1] == {"Owner": "0", "NumJobMatches": str(records), "MalformedAds": "0",
                           "AdCount": str(records)}  # fmt: skip

    run(scenario)
