"""The client's session cache: found by daemon address and command, expired by time."""

from __future__ import annotations

from execd.wire.session import Session, SessionCache, parse_commands


def _session(sid: str, expires_at: float | None) -> Session:
    return Session(sid=sid, key=b"k" * 32, connect_addr="<a:1>", user="u@d", auth_method="FS",
                   valid_commands=frozenset({5, 6}), remote_version="",
                   expires_at=expires_at)  # fmt: skip


def test_session_serves_its_valid_commands_until_it_expires() -> None:
    cache = SessionCache()
    cache.store(_session("s1", expires_at=100.0), command=0)
    assert cache.lookup("<a:1>", 5, now=50.0) is not None
    assert cache.lookup("<a:1>", 0, now=50.0) is not None  # the command it was made for
    assert cache.lookup("<a:1>", 13, now=50.0) is None  # not one of its commands
    assert cache.lookup("<b:2>", 5, now=50.0) is None  # another daemon
    assert cache.lookup("<a:1>", 5, now=100.0) is None  # expired: forgotten
    assert len(cache) == 0 and cache.lookup("<a:1>", 6, now=0.0) is None


def test_invalidate_forgets_every_command_mapping() -> None:
    cache = SessionCache()
    cache.store(_session("s1", None), command=0)
    cache.store(_session("s2", None), command=13)
    cache.invalidate("s1")
    assert [s.sid for s in cache.sessions()] == ["s2"]
    assert cache.lookup("<a:1>", 0, now=0.0) is None
    assert cache.lookup("<a:1>", 13, now=0.0) is not None


def test_valid_commands_parse_htcondors_list() -> None:
    # ping.log: the startd's ValidCommands for a DAEMON session (first entries).
    assert parse_commands("60000,60008, 441,403,bogus,") == {60000, 60008, 441, 403}
    assert "k" * 32 not in repr(_session("s", None))
