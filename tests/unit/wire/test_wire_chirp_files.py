"""Chirp's file calls (condor_chirp fetch, put, remove, rmdir) over real loopback
connections to execd's proxy, with execd's real syscalls to a scripted shadow: what
the job's client gets, what the shadow is sent, and the bounds on what the job asks.
The pool tier compares the same calls with condor_startd
(tests/pool/test_pool_chirp_files.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest
from structlog.testing import capture_logs
from test_wire_chirp_proxy import Client, ScriptedShadow, answer

from execd.errors import RemoteProtocolError
from execd.wire import chirp_budget, chirp_files
from execd.wire.chirp_address import ChirpAddress
from execd.wire.chirp_config import ChirpConfig
from execd.wire.chirp_files import FILE_MAX
from execd.wire.chirp_protocol import OFFLINE
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.encoding import Decoder, Encoder
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink

WANTS_IO = {"WantIOProxy": True}


def with_bytes(rval: int, data: bytes) -> bytes:
    return Encoder(encrypted=True).put_int(rval).put_bytes(data).payload()


def stat_line(size: int) -> bytes:
    fields = f"2049 7 33188 1 1000 1000 0 {size} 4096 8 1700000000 1700000000 1700000000\n"
    return with_bytes(0, fields.encode().ljust(1024, b"\0"))


def serve(shadow: ScriptedShadow, body: Callable[[Client], Awaitable[None]],
          job: dict[str, object] = WANTS_IO, config: ChirpConfig | None = None) -> None:
    async def main() -> None:
        proxy = ChirpProxy(ShadowFileCalls(shadow), job, global_job_id="j",
                           config=config or ChirpConfig())  # fmt: skip
        address: ChirpAddress = await proxy.listen()
        try:
            client = await Client.to(address, address.cookie)
            await body(client)
            client.close()
        finally:
            await proxy.close()

    asyncio.run(main())


def sent(shadow: ScriptedShadow) -> list[Decoder]:
    return [Decoder(m, encrypted=True) for m in shadow.sent]


def test_fetch_is_the_shadows_getfile_after_its_size() -> None:
    shadow = ScriptedShadow([stat_line(5), with_bytes(5, b"hello")])

    async def body(client: Client) -> None:
        assert await client.ask("getfile data/in\\ put.txt") == b"5"
        assert await client.reader.readexactly(5) == b"hello"

    serve(shadow, body)
    stat, getfile = sent(shadow)
    assert (stat.get_int(), stat.get_string()) == (108, "data/in put.txt")
    assert (getfile.get_int(), getfile.get_string()) == (293, "data/in put.txt")


def test_a_fetch_over_the_bound_is_too_big_and_no_getfile_is_sent() -> None:
    shadow = ScriptedShadow([stat_line(FILE_MAX + 1)])

    async def body(client: Client) -> None:
        assert await client.ask("getfile huge") == b"-5"
        assert await client.ask("version") == b"2"

    serve(shadow, body)
    assert [d.get_int() for d in sent(shadow)] == [108]


def test_the_shadows_errno_is_read_in_htcondors_numbering() -> None:
    """CEDAR's errno numbers differ from Linux's above 34: the shadow's 41 is
    ENOTEMPTY (Chirp's -15), its 2 ENOENT (-3), for a stat that fails the getfile says."""
    shadow = ScriptedShadow([answer(-1, 41), answer(0), answer(-1, 2), answer(-1, 2)])

    async def body(client: Client) -> None:
        assert await client.ask("rmdir full") == b"-15"
        assert await client.ask("unlink gone") == b"0"
        assert await client.ask("getfile missing") == b"-3"

    serve(shadow, body)
    assert [(d.get_int(), d.get_string()) for d in sent(shadow)] == \
        [(79, "full"), (115, "gone"), (108, "missing"), (293, "missing")]  # fmt: skip


def test_put_sends_the_clients_bytes_after_the_shadow_opened_the_file() -> None:
    shadow = ScriptedShadow([answer(7), answer(3)])

    async def body(client: Client) -> None:
        assert await client.ask("putfile out.txt 420 3") == b"7"
        client.writer.write(b"abc")
        assert (await client.reader.readline()).rstrip() == b"3"
        assert await client.ask("version") == b"2"

    serve(shadow, body)
    request, buffer = shadow.sent
    first = Decoder(request, encrypted=True)
    assert (first.get_int(), first.get_string(), first.get_int(), first.get_int()) == \
        (294, "out.txt", 420, 3)  # fmt: skip
    assert Decoder(buffer, encrypted=True).get_bytes(3) == b"abc"


def test_a_put_the_shadow_refuses_reads_its_second_answer_too() -> None:
    """25.14.1's shadow answers a failed open twice for a length over 0: both are read,
    so the next call gets its own answer."""
    shadow = ScriptedShadow([answer(-1, 13), answer(-1, 13), answer(0)])

    async def body(client: Client) -> None:
        assert await client.ask("putfile nope/out.txt 420 3") == b"-2"
        assert await client.ask("unlink x") == b"0"

    serve(shadow, body)
    assert shadow.answers == [] and len(shadow.sent) == 2


def test_put_lengths_out_of_bounds_never_reach_the_shadow() -> None:
    shadow = ScriptedShadow()

    async def body(client: Client) -> None:
        assert await client.ask(f"putfile big 420 {FILE_MAX + 1}") == b"-5"
        assert await client.ask("putfile neg 420 -1") == b"-5"
        assert await client.ask("putfile words 420 many") == b"-8"
        assert await client.ask("version") == b"2"

    serve(shadow, body)
    assert shadow.sent == []


def test_a_put_whose_bytes_stop_short_sends_zeros_and_ends_the_connection() -> None:
    shadow = ScriptedShadow([answer(7), answer(5)])

    async def body(client: Client) -> None:
        assert await client.ask("putfile out.txt 420 5") == b"7"
        client.writer.write(b"ab")
        client.writer.write_eof()
        assert await client.reader.read() == b""  # closed without a second answer

    with capture_logs() as events:
        serve(shadow, body)
    assert Decoder(shadow.sent[1], encrypted=True).get_bytes(5) == b"ab\0\0\0"
    assert [e["got"] for e in events if e["event"] == "chirp_put_incomplete"] == [2]


def test_file_calls_need_want_io_proxy_and_enable_chirp_io() -> None:
    for job, config in (({}, ChirpConfig()), (WANTS_IO, ChirpConfig(io=False))):
        shadow = ScriptedShadow()

        async def body(client: Client) -> None:
            for line in ("getfile x", "putfile x 420 1", "unlink x", "rmdir x"):
                assert await client.ask(line) == b"-8"

        serve(shadow, body, {**job, "WantRemoteUpdates": True}, config)
        assert shadow.sent == []


def test_path_calls_send_their_arguments_in_ntsenders_order() -> None:
    shadow = ScriptedShadow([answer(0)] * 5)

    async def body(client: Client) -> None:
        for request in ("chmod m.txt 384", "chown o.txt 10 20", "utime t.txt 5 6",
                        "link -s a b", "rename a\\ b c"):  # fmt: skip
            assert await client.ask(request) == b"0"
        assert await client.ask("chmod m.txt six") == b"-8"  # no shadow call
        assert await client.ask("truncate t.txt 99999999999") == b"-8"  # no C int

    serve(shadow, body)
    chmod, chown, utime, link, rename = sent(shadow)
    assert (chmod.get_int(), chmod.get_string(), chmod.get_int()) == (7, "m.txt", 384)
    assert (chown.get_int(), chown.get_string(), chown.get_int(), chown.get_int()) == \
        (8, "o.txt", 10, 20)  # fmt: skip
    assert (utime.get_int(), utime.get_string(), utime.get_int(), utime.get_int()) == \
        (242, "t.txt", 5, 6)  # fmt: skip
    assert (link.get_int(), link.get_string(), link.get_string()) == (52, "-s", "a")
    assert (rename.get_int(), rename.get_string(), rename.get_string()) == (78, "a b", "c")


def test_stat_getdir_and_readlink_answer_their_text_after_the_line() -> None:
    listing = Encoder(encrypted=True).put_int(10).put_string("keep.txt\n\n").payload()
    shadow = ScriptedShadow([stat_line(9), listing, with_bytes(10, b"remote.txt")])

    async def body(client: Client) -> None:
        assert await client.ask("stat remote.txt") == b"0"
        assert (await client.reader.readline()).split()[7] == b"9"
        assert await client.ask("getdir sub") == b"10"
        assert await client.reader.readexactly(10) == b"keep.txt\n\n"
        assert await client.ask("readlink sym.txt 100") == b"10"
        assert await client.reader.readexactly(10) == b"remote.txt"

    serve(shadow, body)
    assert [d.get_int() for d in sent(shadow)] == [108, 296, 72]


def test_constrain_is_an_update_passed_on_to_the_shadow() -> None:
    """CONDOR_constrain (287), served with the updates (WantIOProxy or
    WantRemoteUpdates), not with the file calls."""
    shadow = ScriptedShadow([answer(0), answer(-1, 13)])

    async def body(client: Client) -> None:
        assert await client.ask("constrain Memory\\ >\\ 10") == b"0"
        assert await client.ask("constrain false") == b"-2"

    serve(shadow, body, {"WantRemoteUpdates": True})
    first = sent(shadow)[0]
    assert (first.get_int(), first.get_string()) == (287, "Memory > 10")
    off = ScriptedShadow()

    async def refused(client: Client) -> None:
        assert await client.ask("constrain true") == b"-8"

    serve(off, refused, WANTS_IO, ChirpConfig(updates=False))
    assert off.sent == []


def test_open_maps_the_path_then_opens_it_with_htcondors_flags() -> None:
    url = Encoder(encrypted=True).put_int(0).put_string("remote:/home/u/job/f.txt").payload()
    fstat = with_bytes(0, b"1 2 33188 1 0 0 0 5 4096 8 1 2 3\n".ljust(1024, b"\0"))
    shadow = ScriptedShadow([url, answer(4), fstat])

    async def body(client: Client) -> None:
        assert await client.ask("open f.txt cwa 420") == b"4"
        assert (await client.reader.readline()).startswith(b"1 2 33188")

    serve(shadow, body)
    info, opened, stat = sent(shadow)
    assert (info.get_int(), info.get_string()) == (-74, "f.txt")
    # w without r: O_WRONLY (1); c: O_CREAT (0x100); a: O_APPEND (0x1000)
    assert (opened.get_int(), opened.get_int(), opened.get_int(), opened.get_string()) == \
        (66, 0x1101, 420, "/home/u/job/f.txt")  # fmt: skip
    assert (stat.get_int(), stat.get_int()) == (24, 4)


def test_write_reads_the_bytes_after_the_line_and_read_is_bounded() -> None:
    shadow = ScriptedShadow([answer(3), with_bytes(2, b"hi"), with_bytes(1, b"y")])

    async def body(client: Client) -> None:
        client.writer.write(b"pwrite 4 3 10\nabc")
        assert (await client.reader.readline()).rstrip() == b"3"
        assert await client.ask("read 4 2") == b"2"
        assert await client.reader.readexactly(2) == b"hi"
        assert await client.ask(f"read 4 {FILE_MAX + 1}") == b"-5"
        assert await client.ask("readlink x 10") == b"1"  # not taken for read's "link x"
        assert await client.reader.readexactly(1) == b"y"
        assert await client.ask("lseek 4 0 7") == b"-8"  # no such whence

    serve(shadow, body)
    pwrite, read, readlink = sent(shadow)
    assert (pwrite.get_int(), pwrite.get_int(), pwrite.get_int(), pwrite.get_int(),
            pwrite.get_bytes(3)) == (290, 4, 3, 10, b"abc")  # fmt: skip
    assert (read.get_int(), read.get_int(), read.get_int()) == (71, 4, 2)
    assert (readlink.get_int(), readlink.get_string()) == (72, "x")


def test_a_write_whose_bytes_stop_short_ends_the_connection_unsent() -> None:
    shadow = ScriptedShadow()

    async def body(client: Client) -> None:
        client.writer.write(b"write 4 10\nabc")
        client.writer.write_eof()
        assert await client.reader.read() == b"-8\n"

    serve(shadow, body)
    assert shadow.sent == []


def test_answers_held_unread_are_bounded_across_the_daemon_and_their_client_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A client that asks for FILE_MAX bytes and does not read them holds its job's
    budget and, with the daemon's budget set to one FILE_MAX, every job's: another
    job's read is answered -5 without reaching its shadow. A client that has not read
    its answer within DATA_WAIT_S is dropped and the bytes given back."""
    monkeypatch.setattr(chirp_files, "DATA_WAIT_S", 0.5)
    monkeypatch.setattr(chirp_budget.DAEMON, "limit", FILE_MAX)
    greedy = ScriptedShadow([with_bytes(FILE_MAX, bytes(FILE_MAX))])
    other = ScriptedShadow([with_bytes(1, b"x")])

    async def main() -> None:
        proxies = [ChirpProxy(ShadowFileCalls(s), WANTS_IO, global_job_id=name)
                   for s, name in ((greedy, "a"), (other, "b"))]  # fmt: skip
        try:
            addresses = [await p.listen() for p in proxies]
            stuck = await Client.to(addresses[0], addresses[0].cookie)
            assert await stuck.ask(f"read 4 {FILE_MAX}") == str(FILE_MAX).encode()
            same_job = await Client.to(addresses[0], addresses[0].cookie)
            assert await same_job.ask("read 4 1") == b"-5"
            client = await Client.to(addresses[1], addresses[1].cookie)
            assert await client.ask("read 4 1") == b"-5"
            async with asyncio.timeout(5):  # the stuck client is dropped
                while chirp_budget.DAEMON.used:
                    await asyncio.sleep(0.05)
            assert await client.ask("read 4 1") == b"1"
            assert await client.reader.readexactly(1) == b"x"
            with contextlib.suppress(ConnectionError):
                while await stuck.reader.read(1 << 20):  # ends short of FILE_MAX bytes
                    pass
            for c in (stuck, same_job, client):
                c.close()
        finally:
            for p in proxies:
                await p.close()

    asyncio.run(asyncio.wait_for(main(), 10))  # without the bounds: a shadow never answers
    assert len(greedy.sent) == 1 and len(other.sent) == 1
    assert chirp_budget.DAEMON.used == 0


class DroppingShadow(ScriptedShadow):
    """A shadow whose connection breaks once a call has reached it."""

    async def recv(self, timeout_s: float | None = None) -> bytes:
        raise RemoteProtocolError("connection reset by peer")


def test_a_write_whose_connection_drops_is_answered_offline_and_never_sent_again() -> None:
    """The write may have run on the shadow: it is not kept to be sent again on a
    reconnect's connection (its bytes would be written twice); the client is answered
    at once, and so are the calls after it while the shadow is away."""
    old = DroppingShadow()
    calls = ShadowFileCalls(old)
    link = ShadowLink(old, claim_id="<c>#1#1", global_job_id="j", lease_s=60, starter_ad={},
                      starter_address="<x>")  # fmt: skip
    calls.attach(link)

    async def main() -> None:
        proxy = ChirpProxy(calls, WANTS_IO, global_job_id="j",
                           connected=lambda: not link.disconnected.is_set())  # fmt: skip
        address = await proxy.listen()
        try:
            client = await Client.to(address, address.cookie)
            client.writer.write(b"write 4 3\nabc")
            assert (await client.reader.readline()).rstrip() == str(OFFLINE).encode()
            assert link.disconnected.is_set()
            assert await client.ask("unlink f") == str(OFFLINE).encode()
            client.close()
        finally:
            link.close()
            await proxy.close()

    asyncio.run(asyncio.wait_for(main(), 10))  # before: waits the lease for a reconnect
    assert [d.get_int() for d in sent(old)] == [120]
