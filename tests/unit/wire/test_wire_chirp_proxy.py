"""The starter's Chirp proxy over real loopback connections, with execd's real syscalls
to a scripted shadow: what a job's condor_chirp (or anything else on the node) gets for
each request, and what the shadow is sent. The pool tier compares the same with
condor_startd (tests/pool/test_pool_chirp.py)."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from wire_pairs import ScriptedPeer

from execd.wire import chirp_proxy
from execd.wire.chirp_address import ChirpAddress
from execd.wire.chirp_delayed import MAX_ATTRS, DelayedUpdates
from execd.wire.chirp_protocol import DELAYED, LINE_MAX, UPDATES, Request, read_request, words
from execd.wire.chirp_proxy import (
    MAX_CONNECTIONS,
    ChirpProxy,
)
from execd.wire.chirp_start import adopt_chirp_proxy, open_chirp_proxy
from execd.wire.classad_codec import decode_ad, to_classad
from execd.wire.encoding import Decoder, Encoder
from execd.wire.output_files import CHIRP_CONFIG, output_items
from execd.wire.shadow_file_calls import ShadowFileCalls

WANTS = {"WantIOProxy": True, "ClusterId": 12, "ProcId": 3}


class ScriptedShadow(ScriptedPeer):
    """The shadow's end of the syscall connection: records what it is sent and answers
    from a list (one answer per call that expects one)."""


def answer(*ints: int, text: str | None = None) -> bytes:
    enc = Encoder(encrypted=True)
    for value in ints:
        enc.put_int(value)
    return (enc.put_string(text) if text is not None else enc).payload()


def config_address(path: Path) -> ChirpAddress:
    """What a .chirp.config says, as condor_chirp reads it."""
    host, port, cookie = path.read_text().split()
    return ChirpAddress(host, int(port), cookie)


class Client:
    """A Chirp client on one connection (condor_chirp's side of the protocol)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def to(cls, address: ChirpAddress, cookie: str | None = None) -> Client:
        client = cls(*await asyncio.open_connection(address.host, address.port))
        if cookie is not None:
            assert await client.ask(f"cookie {cookie}") == b"0"
        return client

    async def ask(self, line: str | bytes) -> bytes:
        self.writer.write((line.encode() if isinstance(line, str) else line) + b"\n")
        await self.writer.drain()
        return (await self.reader.readline()).rstrip(b"\n")

    def close(self) -> None:
        self.writer.close()


def serve(job: dict[str, object], shadow: ScriptedShadow,
          body: Callable[[ChirpProxy, ChirpAddress], Awaitable[None]],
          connected: Callable[[], bool] = lambda: True) -> None:  # fmt: skip
    async def main() -> None:
        proxy = ChirpProxy(ShadowFileCalls(shadow), job, global_job_id="host#12.3#1",
                           connected=connected)  # fmt: skip
        address = await proxy.listen()
        try:
            await body(proxy, address)
        finally:
            await proxy.close()

    asyncio.run(main())


def test_set_get_and_ulog_are_the_shadows_syscalls() -> None:
    shadow = ScriptedShadow([answer(0), answer(0, text='"x y"')])

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        assert await client.ask('set_job_attr ChirpName "x\\ y"') == b"0"
        assert await client.ask("get_job_attr ChirpName") == b"5"
        assert await client.reader.readexactly(5) == b'"x y"'
        assert await client.ask("ulog half\\ way\\ there") == b"0"
        assert await client.ask("version") == b"2"
        client.close()

    serve(WANTS, shadow, body)
    set_call, get_call, ulog_call = (Decoder(m, encrypted=True) for m in shadow.sent)
    # set_job_attr (286): the expression first, then the name (NTsenders.cpp).
    assert (set_call.get_int(), set_call.get_string(), set_call.get_string()) == \
        (286, '"x y"', "ChirpName")  # fmt: skip
    assert (get_call.get_int(), get_call.get_string()) == (285, "ChirpName")
    assert ulog_call.get_int() == 284
    event = to_classad(decode_ad(ulog_call))
    assert (event["MyType"], event["EventTypeNumber"], event["Info"]) == \
        ("GenericEvent", 8, "half way there")  # fmt: skip
    assert (event["Cluster"], event["Proc"]) == (12, 3)


def test_the_shadows_refusal_is_chirps_not_authorized_and_the_next_request_is_served() -> None:
    shadow = ScriptedShadow([answer(-1, 13), answer(0)])  # EACCES, then success

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        assert await client.ask('set_job_attr Owner "mallory"') == b"-2"
        assert await client.ask("set_job_attr ChirpOk 1") == b"0"
        client.close()

    serve(WANTS, shadow, body)


def test_nothing_is_served_before_the_right_cookie_and_the_cookie_is_never_logged(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A first line that is not the cookie is answered -1 and ends its connection; the
    refusals are logged once a minute at most (anyone may connect as often as it likes)."""
    monkeypatch.setattr(chirp_proxy, "WRONG_COOKIE_DELAY_S", 0.01)
    shadow = ScriptedShadow()

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        for first in ("set_job_attr ChirpName 1", "cookie " + "a" * len(address.cookie),
                      "cookie", f"cookie {address.cookie}x"):  # fmt: skip
            client = await Client.to(address)
            assert await client.ask(first) == b"-1"  # not authenticated
            assert await client.ask(f"cookie {address.cookie}") == b""  # and closed
            client.close()
        client = await Client.to(address)
        assert await client.ask(f"cookie {address.cookie}") == b"0"
        assert await client.ask("version") == b"2"
        client.close()

    with capture_logs() as events:
        serve(WANTS, shadow, body)
        cookie_shown = [e for e in events if any("cookie" in str(v) and len(str(v)) > 30
                                                 for v in e.values())]  # fmt: skip
    assert shadow.sent == []  # nothing reached the shadow
    assert cookie_shown == []
    assert [(e["reason"], e["not_logged"]) for e in events
            if e["event"] == "chirp_request_refused"] == [("no cookie presented", 0)]  # fmt: skip


def test_a_stranger_cannot_hold_a_connection_or_lock_the_job_out(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """The cookie is due within COOKIE_WAIT_S of connecting, however the stranger
    trickles its bytes; and strangers beyond MAX_STRANGERS make the oldest go, so the
    job's own condor_chirp always gets in."""
    monkeypatch.setattr(chirp_proxy, "COOKIE_WAIT_S", 0.5)
    monkeypatch.setattr(chirp_proxy, "MAX_STRANGERS", 2)

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        trickler = await Client.to(address)
        loop = asyncio.get_running_loop()
        began = loop.time()
        for byte in b"cookie":  # a byte now and then, never a whole line
            trickler.writer.write(bytes([byte]))
            await trickler.writer.drain()
            await asyncio.sleep(0.1)
        assert await trickler.reader.read() == b""  # closed at the deadline
        assert loop.time() - began < 2.0
        squatters = [await Client.to(address) for _ in range(3)]
        assert await squatters[0].reader.read() == b""  # the oldest made way
        job = await Client.to(address, address.cookie)
        assert await job.ask("version") == b"2"
        for each in (trickler, *squatters, job):
            each.close()

    serve(WANTS, ScriptedShadow(), body)


def test_garbage_and_requests_execd_does_not_serve_get_invalid_request() -> None:
    shadow = ScriptedShadow()

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        for line in (b"\xff\xfe\x00garbage", b"", b"   ", b"open /etc/passwd r zero",
                     b"whoami ten", b"fstat 3x", b"sread 3 1 2 3", b"nosuchcall 3",
                     b"constrain", b"set_job_attr OnlyAName", b"get_job_attr",
                     b"set_job_attr Bad-Name 1", b"get_job_attr ../../x",
                     b"get_job_attr a\x00b", b"x" * LINE_MAX):  # fmt: skip
            assert await client.ask(line) == b"-8", line[:40]
        assert await client.ask("version") == b"2"  # the connection goes on
        client.close()

    serve(WANTS, shadow, body)
    assert shadow.sent == []


def test_a_line_over_the_limit_is_too_big_and_ends_only_its_connection() -> None:
    shadow = ScriptedShadow()

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        other = await Client.to(address, address.cookie)
        client = await Client.to(address, address.cookie)
        assert await client.ask(b"set_job_attr ChirpBig " + b"1" * LINE_MAX) == b"-5"
        assert await client.reader.read() == b""  # closed
        unauthenticated = await Client.to(address)
        assert await unauthenticated.ask(b"cookie " + b"a" * (3 * LINE_MAX)) == b"-5"
        assert await other.ask("version") == b"2"
        for each in (client, unauthenticated, other):
            each.close()

    serve(WANTS, shadow, body)


def test_a_job_without_want_io_proxy_gets_invalid_request_for_everything() -> None:
    shadow = ScriptedShadow()
    for job in ({}, {"WantIOProxy": True, "WantRemoteUpdates": False}):

        async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
            client = await Client.to(address, address.cookie)
            for line in ("set_job_attr ChirpX 1", "get_job_attr Owner", "ulog hi", "version"):
                assert await client.ask(line) == b"-8", line
            client.close()

        serve(job, shadow, body)
    assert shadow.sent == []


def test_while_the_shadow_is_away_calls_are_answered_offline_at_once() -> None:
    shadow = ScriptedShadow()

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        assert await client.ask("set_job_attr ChirpX 1") == b"-17"
        assert await client.ask("ulog hi") == b"-17"
        client.close()

    serve(WANTS, shadow, body, connected=lambda: False)
    assert shadow.sent == []


def test_connections_are_limited_and_close_ends_the_server_and_its_clients() -> None:
    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        clients = [await Client.to(address, address.cookie) for _ in range(MAX_CONNECTIONS)]
        extra = await Client.to(address)
        assert await extra.ask(f"cookie {address.cookie}") == b""  # refused: closed
        await proxy.close()
        for client in clients:
            assert await client.reader.read() == b""
        for each in (*clients, extra):
            each.close()
        with pytest.raises(OSError):
            await Client.to(address)

    serve(WANTS, ScriptedShadow(), body)


def test_the_config_file_is_the_jobs_users_alone_and_names_the_loopback(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    sandbox, ids = box

    async def main() -> None:
        proxy = await open_chirp_proxy(ShadowFileCalls(ScriptedShadow()), WANTS, "j",
                                       sandbox, owner=ids, connected=lambda: True)  # fmt: skip
        assert proxy is not None
        try:
            path = sandbox / CHIRP_CONFIG
            info = os.stat(path)
            assert stat.S_IMODE(info.st_mode) == 0o600 and (info.st_uid, info.st_gid) == ids
            address = config_address(path)
            assert address == proxy.address and address.host == "127.0.0.1"
            assert len(address.cookie) == 31 and address.cookie.islower()
            assert address.cookie not in repr(address)
            # The file is not the job's output.
            assert output_items(sandbox, {}, [], {}) == []
        finally:
            await proxy.close()

    asyncio.run(main())


def test_after_a_restart_the_proxy_goes_on_on_the_listening_socket_handed_over(
        box: tuple[Path, tuple[int, int]], tmp_path: Path) -> None:  # fmt: skip
    """The port is never free between the two images (nobody else can bind it, and a
    connection made meanwhile is served by the new one), and nothing is read back from
    the sandbox: a .chirp.config the job turned into a link to a FIFO changes nothing."""
    sandbox, ids = box
    shadow = ScriptedShadow([answer(0)])

    async def main() -> None:
        calls = ShadowFileCalls(shadow)
        first = await open_chirp_proxy(calls, WANTS, "j", sandbox, owner=ids,
                                       connected=lambda: True)  # fmt: skip
        assert first is not None and first.address is not None
        record = first.export_listener()
        assert record is not None
        await first.close()  # the old image is gone
        with socket.socket() as squatter, pytest.raises(OSError):
            squatter.bind((first.address.host, first.address.port))
        early = await Client.to(first.address)  # waits in the listening socket's backlog
        (sandbox / CHIRP_CONFIG).unlink()
        os.mkfifo(tmp_path / "fifo")
        (sandbox / CHIRP_CONFIG).symlink_to(tmp_path / "fifo")
        again = await adopt_chirp_proxy(record, calls, WANTS, "j", connected=lambda: True)
        assert again is not None
        try:
            assert again.address == first.address
            assert await early.ask(f"cookie {first.address.cookie}") == b"0"
            assert await early.ask("set_job_attr ChirpAfter 1") == b"0"
            early.close()
            handed = again.export_listener()
            assert handed is not None
        finally:
            await again.close()
        with capture_logs() as events:
            assert await adopt_chirp_proxy({**handed, "cookie": "x"}, calls, WANTS, "j",
                                           connected=lambda: True) is None  # fmt: skip
            assert await adopt_chirp_proxy({**handed, "pid": 1}, calls, WANTS, "j",
                                           connected=lambda: True) is None  # fmt: skip
        assert [e["event"] for e in events] == ["chirp_proxy_not_restored"] * 2
        assert first.address.cookie not in str(events)
        with pytest.raises(OSError):  # the refused socket was closed, not leaked
            os.fstat(handed["fd"])
        with socket.socket() as other:  # and the port is free again
            other.bind((first.address.host, first.address.port))

    asyncio.run(main())


def test_words_are_read_as_sscanf_chirp_reads_them() -> None:
    assert words(' a\\ b  "c d" e', 2) == ["a b", '"c']
    assert words("  one", 1) == ["one"]
    assert words("one", 2) is None
    assert words("trailing\\", 1) == ["trailing"]


def test_requests_are_matched_by_prefix_in_condor_starters_order() -> None:
    both = frozenset([UPDATES, DELAYED])
    # With updates on, condor_starter reads get_job_attr_delayed as get_job_attr of
    # `_delayed` (compared in the pool: it answers UNDEFINED).
    assert read_request("get_job_attr_delayed ChirpX", both) == \
        Request("get_job_attr", ["_delayed"])  # fmt: skip
    assert read_request("get_job_attr_delayed ChirpX", frozenset([DELAYED])) == \
        Request("get_job_attr_delayed", ["ChirpX"])  # fmt: skip
    assert read_request("set_job_attr_delayed ChirpX 1", both) == \
        Request("set_job_attr_delayed", ["ChirpX", "1"])  # fmt: skip
    assert read_request("set_job_attr_delayed ChirpX 1", frozenset([UPDATES])) == \
        Request("set_job_attr", ["_delayed", "ChirpX"])  # fmt: skip
    assert read_request("ulog a b", both) == Request("ulog", ["a"])
    assert read_request("versionx", both) == Request("version", [])
    assert read_request(" ulog a", both) is None  # a literal prefix: no leading space
    assert read_request("version", frozenset([DELAYED])) is None


def test_delayed_updates_follow_condor_starters_rules() -> None:
    delayed = DelayedUpdates({"Cmd": '"/bin/job"'})
    assert delayed.record("ChirpA", '"x"') == 0
    assert delayed.record("chirpB", "6*7") == 0
    assert delayed.record("NotChirp", "1") == 1  # refused: not CHIRP_DELAYED_UPDATE_PREFIX
    assert delayed.record("ChirpBad", '"unterminated') == 0  # "success", nothing kept
    assert delayed.record("ChirpLong", '"' + "x" * 993 + '"') == -127
    assert (delayed.lookup("chirpa"), delayed.lookup("CMD"), delayed.lookup("ChirpBad")) == \
        ('"x"', '"/bin/job"', None)  # fmt: skip
    assert delayed.take() == {"ChirpDelayedAttrs": '[ ChirpA = "x"; chirpB = 6 * 7 ]'}
    assert delayed.take() == {}  # sent once
    for n in range(MAX_ATTRS - 2):
        assert delayed.record(f"ChirpN{n}", "1") == 0
    assert delayed.record("ChirpOneTooMany", "1") == 1
    assert delayed.record("ChirpA", "2") == 0  # a name already counted


def test_delayed_updates_ride_on_the_next_update_to_the_shadow() -> None:
    shadow = ScriptedShadow([answer(0), answer(0)])

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        assert await client.ask("set_job_attr_delayed ChirpProgress 50") == b"0"
        assert await client.ask("get_job_attr_delayed ChirpProgress") == b"2"
        assert await client.reader.readexactly(2) == b"50"
        assert await client.ask("get_job_attr_delayed ChirpNone") == b"-3"
        client.close()
        calls = proxy.shadow
        assert isinstance(calls, ShadowFileCalls)
        await calls.register_job_info({"ImageSize": "1000"})
        await calls.register_job_info({"ImageSize": "1000"})

    serve({}, shadow, body)  # no WantIOProxy: delayed updates are served to every job
    first, second = (Decoder(m, encrypted=True) for m in shadow.sent)
    assert first.get_int() == -81
    assert to_classad(decode_ad(first))["ChirpDelayedAttrs"]["ChirpProgress"] == 50
    assert second.get_int() == -81 and "ChirpDelayedAttrs" not in to_classad(decode_ad(second))


def test_job_attributes_that_are_not_utf8_are_answered_as_their_bytes() -> None:
    """A job ad's value need not be UTF-8 (an Iwd in a latin-1 submit directory):
    get_job_attr answers the shadow's bytes, and get_job_attr_delayed the job ad's, as
    they came (condor_starter passes them on), instead of dropping the connection."""
    iwd = b'"/home/u/caf\xe9"'
    shadow = ScriptedShadow([Encoder(encrypted=True).put_int(0).put_string(iwd).payload()])

    async def main() -> None:
        job_wire = {"Iwd": iwd.decode("utf-8", "surrogateescape")}
        # with updates on, `get_job_attr_delayed` would be read as get_job_attr
        for job, line, then in ((WANTS, "get_job_attr Iwd", ("version", b"2")),
                                ({}, "get_job_attr_delayed Iwd",
                                 ("get_job_attr_delayed Nothing", b"-3"))):  # fmt: skip
            proxy = ChirpProxy(ShadowFileCalls(shadow), job, global_job_id="host#12.3#1",
                               job_wire=job_wire)  # fmt: skip
            address = await proxy.listen()
            try:
                client = await Client.to(address, address.cookie)
                assert await client.ask(line) == str(len(iwd)).encode(), line
                assert await client.reader.readexactly(len(iwd)) == iwd
                assert await client.ask(then[0]) == then[1]  # the connection goes on
                client.close()
            finally:
                await proxy.close()

    asyncio.run(main())
    assert len(shadow.sent) == 1  # the delayed one is answered from the job ad


def test_a_client_that_shows_no_cookie_in_time_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chirp_proxy, "COOKIE_WAIT_S", 0.05)

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        idle = await Client.to(address)
        assert await idle.reader.read() == b""  # closed by the proxy
        client = await Client.to(address, address.cookie)
        assert await client.ask("version") == b"2"  # authenticated: no time limit
        for each in (idle, client):
            each.close()

    serve(WANTS, ScriptedShadow(), body)


def test_a_chirp_config_the_input_brought_is_replaced_and_a_link_is_not_followed(
        box: tuple[Path, tuple[int, int]], tmp_path: Path) -> None:  # fmt: skip
    sandbox, ids = box
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    (sandbox / CHIRP_CONFIG).symlink_to(victim)

    async def main() -> None:
        proxy = await open_chirp_proxy(ShadowFileCalls(ScriptedShadow()), WANTS, "j",
                                       sandbox, owner=ids, connected=lambda: True)  # fmt: skip
        assert proxy is not None and proxy.address is not None
        try:
            assert not (sandbox / CHIRP_CONFIG).is_symlink()
            assert config_address(sandbox / CHIRP_CONFIG) == proxy.address
        finally:
            await proxy.close()

    asyncio.run(main())
    assert victim.read_text() == "untouched\n"


def test_a_job_with_want_delayed_updates_false_gets_invalid_request_for_them() -> None:
    shadow = ScriptedShadow()

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        for line in ("set_job_attr_delayed ChirpX 1", "get_job_attr_delayed ChirpX"):
            assert await client.ask(line) == b"-8", line
        client.close()
        assert proxy.shadow.update_extra is None  # its updates carry none

    serve({"WantDelayedUpdates": False}, shadow, body)


def test_a_delayed_update_the_shadow_could_not_read_is_refused() -> None:
    """Only ClassAd names, and values that old syntax (the wire's) carries as they are:
    the shadow asserts on an update it cannot parse, and the job is requeued."""
    shadow = ScriptedShadow([answer(0)])

    async def body(proxy: ChirpProxy, address: ChirpAddress) -> None:
        client = await Client.to(address, address.cookie)
        for line in ("set_job_attr_delayed Chirp] 1",
                     'set_job_attr_delayed ChirpA=1;Owner="x";ChirpB 1',
                     'set_job_attr_delayed ChirpEndsInBackslash "x\\\\\\\\"',
                     'set_job_attr_delayed ChirpNewline "a\\\\nb"'):  # fmt: skip
            assert await client.ask(line) == b"1", line
        for line in ('set_job_attr_delayed ChirpBackslash "a\\\\\\\\b"',
                     'set_job_attr_delayed ChirpQuote "q\\\\"q"',
                     "set_job_attr_delayed ChirpList {1,2}"):  # fmt: skip
            assert await client.ask(line) == b"0", line
        client.close()
        calls = proxy.shadow
        assert isinstance(calls, ShadowFileCalls)
        await calls.register_job_info({"ImageSize": "1000"})

    serve({}, shadow, body)
    update = Decoder(shadow.sent[0], encrypted=True)
    assert update.get_int() == -81
    nested = to_classad(decode_ad(update))["ChirpDelayedAttrs"]  # the Old parser's reading
    assert sorted(nested.keys()) == ["ChirpBackslash", "ChirpList", "ChirpQuote"]
    assert (nested["ChirpBackslash"], nested["ChirpQuote"]) == ("a\\b", 'q"q')


def test_words_are_split_on_c_isspace_only() -> None:
    """sscanf_chirp splits on C's isspace: Unicode spaces are part of a word."""
    for space in ("\u00a0", "\u0085", "\u2028", "\x1c", "\x1f"):
        assert words(f"a{space}b c", 2) == [f"a{space}b", "c"]
    assert words("a\tb\vc\fd\re\nf", 6) == ["a", "b", "c", "d", "e", "f"]


def test_a_connection_accepted_as_the_proxy_closes_is_turned_away() -> None:
    """A handler that first runs after close() (its connection accepted just before)
    serves nothing: the shadow's calls are over."""
    shadow = ScriptedShadow()

    async def main() -> None:
        proxy = ChirpProxy(ShadowFileCalls(shadow), WANTS, global_job_id="j")
        address = await proxy.listen()
        ours, theirs = socket.socketpair()
        await proxy.close()
        server_side = await asyncio.open_connection(sock=ours)
        client = Client(*await asyncio.open_connection(sock=theirs))
        client.writer.write(f"cookie {address.cookie}\nversion\n".encode())
        handler = asyncio.create_task(proxy._accept(*server_side))  # as the server would
        try:
            got = await asyncio.wait_for(client.reader.read(), 5)
        except ConnectionResetError:  # closed with the lines unread
            got = b""
        assert got == b""  # nothing answered
        await handler
        client.close()

    asyncio.run(main())


def test_a_job_that_wants_no_chirp_gets_no_proxy_and_no_config(
        box: tuple[Path, tuple[int, int]]) -> None:  # fmt: skip
    """As condor_starter: no proxy for a job with neither WantIOProxy, updates nor
    delayed updates (WantDelayedUpdates = false), unless it is a java job."""
    sandbox, ids = box

    async def main() -> None:
        calls = ShadowFileCalls(ScriptedShadow())
        none = {"WantDelayedUpdates": False, "WantRemoteUpdates": False}
        assert await open_chirp_proxy(calls, none, "j", sandbox, owner=ids,
                                      connected=lambda: True) is None  # fmt: skip
        assert not (sandbox / CHIRP_CONFIG).exists()
        java = await open_chirp_proxy(calls, {**none, "JobUniverse": 10}, "j", sandbox,
                                      owner=ids, connected=lambda: True)  # fmt: skip
        assert java is not None
        await java.close()
        assert (sandbox / CHIRP_CONFIG).exists()

    asyncio.run(main())
