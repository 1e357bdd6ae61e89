"""A live encrypted connection handed from one Channel to a new one (execd.wire.handover):
the peer goes on exchanging messages and notices nothing; a record that is not this
process's own (another pid, another socket behind the number) is never adopted."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest
from wire_pairs import channel_pair

from execd.errors import RemoteProtocolError
from execd.wire.channel import Channel
from execd.wire.handover import adopt_connection, export_connection, release_connection

KEY = bytes(range(32))


async def encrypted_pair() -> tuple[Channel, Channel]:
    ours, theirs = await channel_pair()
    for channel in (ours, theirs):
        channel.enable_crypto(KEY)
    # both directions' first packets (they carry the handshake digests)
    await ours.send(b"hello")
    assert await theirs.recv() == b"hello"
    await theirs.send(b"hello back")
    assert await ours.recv() == b"hello back"
    return ours, theirs


def test_the_peer_goes_on_with_the_adopted_connection() -> None:
    async def scenario() -> list[bytes]:
        ours, theirs = await encrypted_pair()
        for n in range(3):  # counters move on
            await ours.send(b"update %d" % n)
            assert await theirs.recv() == b"update %d" % n
        record = export_connection(ours)
        assert record is not None
        assert os.get_inheritable(record["fd"])  # survives an exec
        await ours.close()  # the old image lets go; the duplicate keeps the connection
        adopted = await adopt_connection(record, timeout_s=5)
        assert adopted is not None
        got = []
        await adopted.send(b"after the restart")
        got.append(await theirs.recv())
        await theirs.send(b"answer")
        got.append(await adopted.recv())
        await adopted.close()
        with pytest.raises(RemoteProtocolError):  # closed for the peer only now
            await theirs.recv()
        await theirs.close()
        return got

    assert asyncio.run(scenario()) == [b"after the restart", b"answer"]


def test_no_export_before_both_sides_have_spoken_encrypted() -> None:
    async def scenario() -> dict[str, object] | None:
        ours, theirs = await channel_pair()
        ours.enable_crypto(KEY)
        theirs.enable_crypto(KEY)
        await ours.send(b"one way only")
        await theirs.recv()
        try:
            return export_connection(ours)
        finally:
            await ours.close()
            await theirs.close()

    assert asyncio.run(scenario()) is None


@pytest.mark.parametrize("change", ["pid", "inode", "fd"])
def test_a_record_that_is_not_this_images_own_is_not_adopted(change: str) -> None:
    """After a crash (another pid) or with another socket behind the number, the record
    names nothing this process may take: it is ignored and nothing is closed."""

    async def scenario() -> None:
        ours, theirs = await encrypted_pair()
        record = export_connection(ours)
        assert record is not None
        duplicate = record["fd"]
        other = socket.socket()
        try:
            if change == "pid":
                record["pid"] += 1
            elif change == "inode":
                record["inode"] += 1
            else:
                record["fd"] = other.fileno()
            assert await adopt_connection(record, timeout_s=5) is None
            release_connection(record)
            os.fstat(other.fileno())  # still open
            os.fstat(duplicate)
        finally:
            os.close(duplicate)
            other.close()
            await ours.close()
            await theirs.close()

    asyncio.run(scenario())
