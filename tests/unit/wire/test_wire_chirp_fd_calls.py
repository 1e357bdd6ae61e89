"""Chirp's calls on the shadow's descriptors (fsync, fchown, fchmod, ftruncate, fstat,
fstatfs, sread, swrite) and lookup, whoami, whoareyou, over real loopback connections
to execd's proxy with execd's real syscalls to a scripted shadow: what the shadow is
sent (condor_starter's NTsenders numbers and order), what the client gets, and the
answers to bad input. The pool tier compares them with condor_startd
(tests/pool/test_pool_chirp_fd_calls.py)."""

from __future__ import annotations

import asyncio

from test_wire_chirp_files import WANTS_IO, DroppingShadow, sent, serve, stat_line, with_bytes
from test_wire_chirp_proxy import Client, ScriptedShadow, answer

from execd.wire.chirp_files import FILE_MAX
from execd.wire.chirp_protocol import FILES, OFFLINE, UPDATES, Request, read_request
from execd.wire.chirp_proxy import ChirpProxy
from execd.wire.encoding import Encoder
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.shadow_link import ShadowLink


def test_requests_are_read_in_condor_starters_order() -> None:
    """`fstat %d` comes first and does not take `fstatfs 3` (fs is no number);
    `whoami %d` does not take `whoareyou`; `sread` is not `read`."""
    files = frozenset([FILES, UPDATES])
    assert read_request("fstatfs 3", files) == Request("fstatfs", ["3"])
    assert read_request("fstat 3", files) == Request("fstat", ["3"])
    assert read_request("whoareyou host 10", files) == Request("whoareyou", ["host", "10"])
    assert read_request("sread 3 4 0 1 2", files) == Request("sread", ["3", "4", "0", "1", "2"])
    assert read_request("fsync 3 extra words", files) == Request("fsync", ["3"])
    assert read_request("lookup a\\ b", files) == Request("lookup", ["a b"])
    for refused in ("fchown 3 0", "fchmod three 384", "whoami", "swrite 3 1 2 3"):
        assert read_request(refused, files) is None, refused
    assert read_request("fstat 3", frozenset([UPDATES])) is None  # files not granted


def test_descriptor_calls_are_the_shadows_with_their_numbers() -> None:
    """fsync (26), fchown (20), fchmod (19), ftruncate (27): the rval; fstat and fstatfs:
    0, then the line, both sent as CONDOR_fstat (24) as condor_starter's fstatfs is."""
    shadow = ScriptedShadow([answer(0), answer(-1, 1), answer(0), answer(0),
                             stat_line(5), stat_line(7), answer(-1, 9)])  # fmt: skip

    async def body(client: Client) -> None:
        assert await client.ask("fsync 4") == b"0"
        assert await client.ask("fchown 4 0 0") == b"-2"  # EPERM
        assert await client.ask("fchmod 4 384") == b"0"
        assert await client.ask("ftruncate 4 5") == b"0"
        assert await client.ask("fstat 4") == b"0"
        assert (await client.reader.readline()).split()[7] == b"5"
        assert await client.ask("fstatfs 4") == b"0"
        assert len((await client.reader.readline()).split()) == 13  # fstat's line
        assert await client.ask("fstat 99") == b"-12"  # EBADF

    serve(shadow, body)
    calls = [[d.get_int() for _ in range(n)] for d, n in
             zip(sent(shadow), (2, 4, 3, 3, 2, 2, 2), strict=True)]  # fmt: skip
    assert calls == [[26, 4], [20, 4, 0, 0], [19, 4, 384], [27, 4, 5], [24, 4], [24, 4],
                     [24, 99]]  # fmt: skip


def test_sread_and_swrite_pass_their_strides_and_bytes() -> None:
    shadow = ScriptedShadow([with_bytes(4, b"aceg"), answer(3)])

    async def body(client: Client) -> None:
        assert await client.ask("sread 4 4 0 1 2") == b"4"
        assert await client.reader.readexactly(4) == b"aceg"
        client.writer.write(b"swrite 4 3 1 1 3\nxyz")
        assert (await client.reader.readline()).rstrip() == b"3"

    serve(shadow, body)
    sread, swrite = sent(shadow)
    assert [sread.get_int() for _ in range(6)] == [299, 4, 4, 0, 1, 2]
    assert [swrite.get_int() for _ in range(6)] == [291, 4, 3, 1, 1, 3]
    assert swrite.get_bytes(3) == b"xyz"


def test_bad_lengths_get_condor_starters_answers_and_the_connection_goes_on() -> None:
    """A negative length is answered -7 (condor_starter's malloc of it fails), one over
    the bound -5, a word that is no C int -8: none reaches the shadow. A length of 0 is
    the shadow's to refuse (EINVAL, -8)."""
    shadow = ScriptedShadow([answer(-1, 22), answer(-1, 22), answer(-1, 22)])

    async def body(client: Client) -> None:
        assert await client.ask("sread 4 -1 0 1 2") == b"-7"
        assert await client.ask(f"sread 4 {FILE_MAX + 1} 0 1 2") == b"-5"
        assert await client.ask("sread 4 99999999999 0 1 2") == b"-8"
        assert await client.ask("swrite 4 -3 0 1 2") == b"-7"  # no bytes follow it
        assert await client.ask("whoami -1") == b"-7"
        assert await client.ask("whoareyou host -5") == b"-7"
        assert await client.ask("fchmod 4 4294967296") == b"-8"
        assert await client.ask("sread 4 0 0 1 2") == b"-8"  # the shadow's EINVAL
        client.writer.write(b"swrite 4 0 0 1 2\n")
        assert (await client.reader.readline()).rstrip() == b"-8"
        assert await client.ask("whoami 5120") == b"-8"  # condor_chirp's: over 1024
        assert await client.ask("version") == b"2"

    serve(shadow, body)
    assert [d.get_int() for d in sent(shadow)] == [299, 291, 297]


def test_negative_read_and_write_lengths_are_no_memory_and_the_connection_goes_on() -> None:
    """condor_starter's malloc of a negative length fails: pread, write and pwrite are
    answered -7 and the next request is served (no bytes follow a negative write);
    read too (condor_starter writes no answer to it at all: docs/pool.md)."""
    shadow = ScriptedShadow()

    async def body(client: Client) -> None:
        assert await client.ask("pread 4 -1 0") == b"-7"
        assert await client.ask("write 4 -1") == b"-7"
        assert await client.ask("pwrite 4 -2 0") == b"-7"
        assert await client.ask("read 4 -1") == b"-7"
        assert await client.ask("version") == b"2"

    serve(shadow, body)
    assert shadow.sent == []


def test_lookup_of_a_url_that_is_not_utf8_answers_its_bytes() -> None:
    """The shadow's URL holds the submit directory (or a FileRemaps entry), which need
    not be UTF-8: the client gets its length and its bytes as they came."""
    url = b"remote:/home/u/caf\xe9/f.txt"
    shadow = ScriptedShadow([Encoder(encrypted=True).put_int(0).put_string(url).payload()])

    async def body(client: Client) -> None:
        assert await client.ask("lookup f.txt") == str(len(url)).encode()
        assert await client.reader.readexactly(len(url)) == url
        assert await client.ask("version") == b"2"

    serve(shadow, body)


def test_fstat_is_not_sent_again_after_a_reconnect() -> None:
    """Descriptor N of a reconnected (new) shadow is another file: an fstat whose
    connection drops is answered -17 at once, as condor_starter answers it, and is not
    kept for the reconnect's connection (which would answer another file's line)."""
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
            assert await client.ask("fstatfs 4") == str(OFFLINE).encode()
            assert link.disconnected.is_set()
            assert await client.ask("fstat 4") == str(OFFLINE).encode()
            client.close()
        finally:
            link.close()
            await proxy.close()

    asyncio.run(asyncio.wait_for(main(), 10))  # before: waits the lease for a reconnect
    assert [(d.get_int(), d.get_int()) for d in sent(old)] == [(24, 4)]


def test_whoami_whoareyou_and_lookup_answer_the_shadows_text() -> None:
    url = Encoder(encrypted=True).put_int(0).put_string("remote:/home/u/job/f.txt").payload()
    shadow = ScriptedShadow([with_bytes(6, b"CONDOR"), with_bytes(7, b"UNKNOWN"),
                             answer(-1, 28), url, answer(-1, 2)])  # fmt: skip

    async def body(client: Client) -> None:
        assert await client.ask("whoami 100") == b"6"
        assert await client.reader.readexactly(6) == b"CONDOR"
        assert await client.ask("whoareyou some.host 100") == b"7"
        assert await client.reader.readexactly(7) == b"UNKNOWN"
        assert await client.ask("whoami 3") == b"-6"  # ENOSPC
        assert await client.ask("lookup f.txt") == b"24"
        assert await client.reader.readexactly(24) == b"remote:/home/u/job/f.txt"
        assert await client.ask("lookup missing") == b"-3"

    serve(shadow, body)
    whoami, whoareyou, short, lookup, missing = sent(shadow)
    assert (whoami.get_int(), whoami.get_int()) == (297, 100)
    assert (short.get_int(), short.get_int()) == (297, 3)
    assert (whoareyou.get_int(), whoareyou.get_string(), whoareyou.get_int()) == \
        (298, "some.host", 100)  # fmt: skip
    assert (lookup.get_int(), lookup.get_string()) == (-74, "f.txt")
    assert (missing.get_int(), missing.get_string()) == (-74, "missing")


def test_the_new_calls_need_want_io_proxy() -> None:
    shadow = ScriptedShadow()

    async def body(client: Client) -> None:
        for line in ("fsync 4", "fstat 4", "fstatfs 4", "fchown 4 0 0", "fchmod 4 384",
                     "ftruncate 4 0", "sread 4 4 0 1 2", "lookup f", "whoami 100",
                     "whoareyou h 100"):  # fmt: skip
            assert await client.ask(line) == b"-8", line
        client.writer.write(b"swrite 4 1 0 1 1\n")
        assert (await client.reader.readline()).rstrip() == b"-8"

    serve(shadow, body, job={"WantRemoteUpdates": True})
    assert shadow.sent == []
