"""Streamed output (execd.wire.stream_output) handed to the next image by a restart in
place: the adopted stream never uses the old image's shadow descriptor, which a reconnect
taken while the stream was quiet made the old shadow's. Shadows on real socket pairs."""

from __future__ import annotations

import asyncio
import os
import types
from pathlib import Path

from wire_pairs import channel_pair

from execd.wire.channel import Channel
from execd.wire.chirp_files import LSEEK, O_CREAT, O_WRONLY, OPEN, WRITE
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink
from execd.wire.streamed_output import StreamedOutput

SEC_SESSION_INFO = 288


class Shadow:
    """One shadow's side of the calls: what it was sent, each descriptor argument kept."""

    def __init__(self, fd: int) -> None:
        self.fd = fd  # the descriptor its open answers
        self.calls: list[tuple[object, ...]] = []
        self.data = bytearray()

    async def serve(self, channel: Channel) -> None:
        position = 0
        while True:
            dec = channel.decoder(await channel.recv(timeout_s=30))
            number = dec.get_int()
            rval = 0
            if number == OPEN:
                flags, _, _ = dec.get_int(), dec.get_int(), dec.get_string()
                self.calls.append(("open", flags))
                rval = self.fd
            elif number == LSEEK:
                fd, offset, whence = dec.get_int(), dec.get_int(), dec.get_int()
                self.calls.append(("lseek", fd, offset, whence))
                position = rval = len(self.data) if whence == 2 else offset
            elif number == WRITE:
                fd, size = dec.get_int(), dec.get_int()
                self.calls.append(("write", fd, size))
                self.data[position:position + size] = dec.get_bytes(size)
                rval = size
            else:
                self.calls.append((number,))
            enc = channel.encoder().put_int(rval)
            if number == SEC_SESSION_INFO:
                for _ in range(6):
                    enc.put_string("x")
            await channel.send(enc.payload())


def _link(channel: Channel) -> ShadowLink:
    return ShadowLink(channel, claim_id="<1.2.3.4:5>#1#1#x", global_job_id="j",
                      lease_s=600.0, starter_ad={}, starter_address="<1.2.3.4:5>")  # fmt: skip


def test_an_adopted_stream_reopens_its_file_before_writing_after_a_quiet_reconnect(
        tmp_path: Path) -> None:  # fmt: skip
    asyncio.run(_quiet_reconnect_then_restart(tmp_path))


async def _quiet_reconnect_then_restart(tmp_path: Path) -> None:
    """The shadow reconnects while the job is quiet (adopt_reconnect takes the new
    connection at once); `execd restart` comes before the job writes again and hands
    over the new connection (the conversation is idle). The next image's first write
    must not carry the old shadow's descriptor (5) to the new shadow (whose 5 is
    another file or none): it opens the file there first, not truncated."""
    ours, old_side = await channel_pair()
    fresh, new_side = await channel_pair()
    old, new = Shadow(5), Shadow(9)
    new.data += b"first\n"  # what the old shadow's file already holds (the same file)
    peers = [asyncio.create_task(old.serve(old_side)), asyncio.create_task(new.serve(new_side))]
    link = _link(ours)
    calls = ShadowFileCalls(ours)
    calls.attach(link)
    sandbox = tmp_path / "dir_1"
    sandbox.mkdir()
    streams = StreamedOutput.for_job(calls, {"Out": "out.txt", "StreamOut": True}, sandbox, "j")
    await streams.open(os.getuid(), os.getgid())
    streams.started()
    streams.streams["Out"].offset = len(b"first\n")  # the job wrote its first line
    request = types.SimpleNamespace(transfer_socket=None, transfer_key=None)
    offered = asyncio.create_task(link.offer(fresh, request))  # type: ignore[arg-type]
    while link.connections == 0:  # adopt_reconnect takes it with nobody calling
        await asyncio.sleep(0.01)
    assert calls.channel is fresh and not calls.in_call and not link.disconnected.is_set()
    records = streams.export()  # the restart in place: the record and `fresh` go over
    fifo = streams.fifo("Out")
    assert fifo is not None

    # the next image
    calls2 = ShadowFileCalls(fresh)
    calls2.attach(_link(fresh))
    adopted = StreamedOutput.adopted(calls2, records, "j")
    assert list(adopted.streams) == ["Out"]
    writer = os.open(fifo, os.O_WRONLY)
    os.write(writer, b"second\n")
    os.close(writer)
    copy = asyncio.create_task(adopted.streams["Out"].run())
    await asyncio.wait_for(copy, 10)
    fd_calls = [c for c in new.calls if c[0] in ("lseek", "write")]
    assert all(c[1] == 9 for c in fd_calls), new.calls  # never the old shadow's 5
    assert new.calls[1:4] == [("open", O_CREAT | O_WRONLY), ("lseek", 9, 0, 2),
                              ("lseek", 9, 6, 0)]  # fmt: skip
    assert bytes(new.data) == b"first\nsecond\n"
    assert [c for c in old.calls if c[0] != "open"] == []
    streams.close(handed_over=True)  # what the old image does
    adopted.close()
    for task in (*peers, offered):
        task.cancel()
    await asyncio.gather(*peers, offered, return_exceptions=True)
    for channel in (ours, old_side, fresh, new_side):
        await channel.close()
