"""How long GET_HISTORY keeps execd's event loop from other work
(execd/daemon/pool_history.py): QUERIES streamed whole-ad queries (`condor_history -l`)
read one 20 MB history file (5000 records of 132 attributes) at once over socket pairs,
while a task asks for the loop every millisecond.

Reports: the longest gap between that task's turns (what a claim activation or a
shadow's message would wait at most), the 99th percentile, and the time all queries took.

Run: .venv/bin/python bench/bench_history_stall.py [QUERIES]
"""

from __future__ import annotations

import asyncio
import socket
import sys
import tempfile
import time
from pathlib import Path

from loop_gaps import LoopGaps

from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.pool_history import HistoryQueue
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.commands import Command
from execd.wire.server import Peer

RECORDS = 5000
ATTRIBUTES = 132
QUERY: WireAd = {"HistoryRecordSource": '"STARTD"', "StreamResults": "true"}
PEER = Peer(user="bench@pool", method="FS", sid="s", address="127.0.0.1:1")


def record(n: int) -> str:
    lines = [f"ClusterId = {n}", "ProcId = 0", f'Owner = "user{n % 7}"']
    lines += [f'Attr{i} = "{"v" * 20}{i}"' if i % 3 else f"Attr{i} = {i} * ClusterId"
              for i in range(ATTRIBUTES - 3)]  # fmt: skip
    return "\n".join(lines) + f"\n*** Offset = {n} ClusterId = {n} ProcId = 0 CurrentTime = 0\n"


async def pair() -> tuple[Channel, Channel]:
    a, b = socket.socketpair()
    ra, wa = await asyncio.open_connection(sock=a)
    rb, wb = await asyncio.open_connection(sock=b)
    return Channel(ra, wa, peer="client", timeout_s=600), Channel(rb, wb, peer="execd",
                                                                  timeout_s=600)  # fmt: skip


async def measure(history: Path, queries: int) -> None:
    text = f"STARTD_HISTORY = {history}\n"
    settings = load_settings(parse_config_text(text, filename="bench.conf", env={}))
    queue = HistoryQueue(lambda: settings)
    async def query() -> int:
        client, server = await pair()
        await client.send(encode_ad(client.encoder(), QUERY).payload())
        task = asyncio.create_task(queue.serve(server, Command.GET_HISTORY, PEER))
        ads = 0
        while decode_ad(client.decoder(await client.recv())).get("Owner") != "0":
            ads += 1
        await task
        await client.close()
        await server.close()
        return ads

    async with LoopGaps() as gaps:
        start = time.monotonic()
        counts = await asyncio.gather(*(query() for _ in range(queries)))
        took = time.monotonic() - start
    print(f"{queries} queries x {counts[0] - 1} ads: {took:.1f} s; loop gap max "
          f"{gaps.longest() * 1000:.1f} ms, p99 {gaps.p99() * 1000:.1f} ms, "
          f"{len(gaps.gaps)} turns")


def main() -> None:
    queries = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "startd_history"
        history.write_text("".join(record(n) for n in range(RECORDS)))
        print(f"history: {history.stat().st_size / 1e6:.1f} MB")
        asyncio.run(measure(history, queries))


if __name__ == "__main__":
    main()
