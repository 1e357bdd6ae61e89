"""IDTOKENS on execd's server side, pinned to tokens the real `condor_token_create`
(HTCondor 25.14.1) signed with test keys (tests/fixtures/idtokens, see its README):
execd re-derives each token's signature from the key file alone and the challenge/response
with execd's client (whose K comes from the token's real signature) succeeds; an altered
signature, an expired token, a foreign issuer, an unknown key and a capability token are
refused with their reason and no secret; a token's scope limits the commands its holder
may send. The real condor_ping/condor_drain against execd: tests/pool/test_pool_idtokens.py.
"""

from __future__ import annotations

import asyncio
import base64
import getpass
import json
import shutil
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from wire_pairs import channel_pair, raw_pair

from execd.errors import ConfigError, ProtocolError
from execd.wire.auth_fs import AuthenticationFailedError
from execd.wire.auth_token import IdToken, authenticate_token, parse_token, serve_token
from execd.wire.channel import Channel
from execd.wire.collector import open_command
from execd.wire.commands import Command, within_limits
from execd.wire.encoding import Encoder
from execd.wire.security import ClientSecurity, NotAuthorizedError
from execd.wire.server import CommandServer, Peer, ServerSecurity
from execd.wire.sinful import parse_sinful
from execd.wire.token_issuer import TokenIssuer, TokenRefusedError, unscramble

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "idtokens"
TOKENS: dict[str, str] = json.loads((FIXTURES / "tokens.json").read_text())


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    keys = tmp_path / "passwords.d"
    keys.mkdir()
    shutil.copy(FIXTURES / "site2", keys / "site2")
    return TokenIssuer(trust_domain="pool.example", pool_key_file=str(FIXTURES / "POOL"),
                       password_directory=str(keys))  # fmt: skip


def token(name: str) -> IdToken:
    return parse_token(TOKENS[name])


def altered(name: str) -> IdToken:
    head, body, sig = TOKENS[name].split(".")
    raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
    raw[5] ^= 0x40
    return parse_token(".".join([head, body, base64.urlsafe_b64encode(raw).decode().rstrip("=")]))


async def exchange(issuer: TokenIssuer, presented: IdToken) -> tuple[object, object]:
    """Both sides over a socketpair: (server result, client result), exceptions as values."""
    server, client = await channel_pair(timeout_s=2)
    try:
        results = await asyncio.gather(serve_token(server, issuer),
                                       authenticate_token(client, presented),
                                       return_exceptions=True)  # fmt: skip
    finally:
        await server.close()
        await client.close()
    return results[0], results[1]


def test_the_real_tools_signature_is_rederived_from_the_key_files(issuer: TokenIssuer) -> None:
    for name in ("alice", "carol_site2", "admin_read_only"):
        presented = token(name)
        claims = issuer.check(presented.header_payload, now=1795423826)
        assert issuer.signature(claims, presented.header_payload) == presented.signature
    # the file is scrambled with DE AD BE EF; the POOL key is used twice over
    raw = (FIXTURES / "POOL").read_bytes()
    assert issuer.signing_key("POOL") == unscramble(raw) * 2
    assert unscramble(unscramble(raw)) == raw


@pytest.mark.asyncio
async def test_a_pool_token_authenticates_as_its_subject(issuer: TokenIssuer) -> None:
    for name, subject in (("alice", "alice@pool.example"), ("carol_site2", "carol@pool.example")):
        claims, server_name = await exchange(issuer, token(name))
        assert not isinstance(claims, BaseException), claims
        assert claims.subject == subject and claims.limits is None  # type: ignore[attr-defined]
        assert server_name == "condor@password"


@pytest.mark.asyncio
async def test_a_scoped_token_carries_its_limits(issuer: TokenIssuer) -> None:
    claims, _ = await exchange(issuer, token("admin_read_only"))
    assert claims.limits == frozenset({"READ"})  # type: ignore[attr-defined]
    assert not within_limits(Command.DRAIN_JOBS, frozenset({"READ"}))
    assert not within_limits(Command.REQUEST_CLAIM, frozenset({"WRITE"}))
    assert within_limits(Command.DRAIN_JOBS, frozenset({"ADMINISTRATOR"}))
    assert within_limits(Command.REQUEST_CLAIM, frozenset({"DAEMON"}))
    assert within_limits(Command.QUERY_STARTD_ADS, frozenset({"DAEMON"}))  # DAEMON > WRITE > READ
    assert within_limits(Command.DRAIN_JOBS, None)


@pytest.mark.asyncio
@pytest.mark.parametrize(("presented", "reason"), [
    (lambda: altered("alice"), "not signed by this pool's key (bad signature)"),
    (lambda: token("bob_expired"), "token expired"),
    (lambda: token("alice_foreign"), "issued by 'other.example', not by this pool's trust "
                                     "domain 'pool.example'"),
])  # fmt: skip
async def test_refused_tokens_name_the_reason(issuer: TokenIssuer, presented: object,
                                              reason: str) -> None:  # fmt: skip
    bad: IdToken = presented()  # type: ignore[operator]
    refused, client = await exchange(issuer, bad)
    assert isinstance(refused, AuthenticationFailedError)
    assert reason in str(refused)
    assert isinstance(client, AuthenticationFailedError)  # the client is told no, too
    sig = bad.text.split(".")[2]
    assert sig not in str(refused) and bad.text not in str(refused)


def test_keys_and_claims_execd_cannot_verify_are_refused(tmp_path: Path) -> None:
    alice = token("alice")
    no_pool = TokenIssuer(trust_domain="pool.example", password_directory=str(tmp_path))
    claims = no_pool.check(alice.header_payload)
    with pytest.raises(TokenRefusedError, match="no SEC_TOKEN_POOL_SIGNING_KEY_FILE"):
        no_pool.signature(claims, alice.header_payload)
    carol = token("carol_site2")
    with pytest.raises(TokenRefusedError, match="key 'site2', which execd cannot read"):
        no_pool.signature(no_pool.check(carol.header_payload), carol.header_payload)
    old = TokenIssuer(trust_domain="pool.example", max_age_s=60)
    with pytest.raises(TokenRefusedError, match="SEC_TOKEN_MAX_AGE is 60"):
        old.check(alice.header_payload, now=1795423826 + 61)

    def forged(payload: dict[str, object], kid: str = "POOL") -> str:
        enc = [json.dumps(part).encode() for part in ({"alg": "HS256", "kid": kid}, payload)]
        return ".".join(base64.urlsafe_b64encode(p).decode().rstrip("=") for p in enc)

    base = {"iss": "pool.example", "jti": "1", "sub": "x@y"}
    for payload, kid, why in (
        ({**base, "cap": True}, "POOL", "capability tokens"),
        ({"iss": "pool.example", "jti": "1"}, "POOL", "capability tokens"),
        ({"iss": "pool.example", "sub": "x@y"}, "POOL", "no id"),
        ({"jti": "1", "sub": "x@y"}, "POOL", "no issuer"),
        (base, "../POOL", "not a file name"),
    ):
        with pytest.raises(TokenRefusedError, match=why):
            issuer_ = TokenIssuer(trust_domain="pool.example", password_directory=str(tmp_path))
            checked = issuer_.check(forged(payload, kid))
            issuer_.signature(checked, forged(payload, kid))
    with pytest.raises(TokenRefusedError, match="not a JWT"):
        no_pool.check("garbage")


class Knobs:
    """A config with only these knobs (what TokenIssuer.from_settings reads)."""

    def __init__(self, **knobs: object) -> None:
        self.knobs = knobs

    def get_str(self, name: str) -> str | None:
        value = self.knobs.get(name)
        return None if value is None else str(value)

    def get_int(self, name: str) -> int | None:
        value = self.knobs.get(name)
        return None if value is None else int(str(value))


@pytest.mark.parametrize(("expr", "revoked"), [
    ('sub =?= "alice@pool.example"', {"alice"}),  # the manual's examples
    ('sub =?= "alice@pool.example" && iat <= 1795423826', {"alice"}),
    ('jti =?= "cdd23771b8799eb051144bc4598f6653"', {"carol_site2"}),
    ('iat > 1795423830', {"carol_site2"}),
    ("exp > 0", {"alice", "carol_site2", "admin_read_only"}),  # undefined exp: revoked
    ('"yes"', {"alice", "carol_site2", "admin_read_only"}),  # not boolean-like: revoked
    ("false", set()),
])  # fmt: skip
def test_sec_token_revocation_expr_refuses_the_tokens_it_matches(expr: str,
                                                                 revoked: set[str]) -> None:
    issuer = TokenIssuer.from_settings(Knobs(SEC_TOKEN_REVOCATION_EXPR=expr), "pool.example")
    for name in ("alice", "carol_site2", "admin_read_only"):
        if name in revoked:
            with pytest.raises(TokenRefusedError, match="revoked by SEC_TOKEN_REVOCATION_EXPR"):
                issuer.check(token(name).header_payload)
        else:
            assert issuer.check(token(name).header_payload).subject.endswith("@pool.example")


def test_sec_token_revocation_expr_old_name_and_config_errors() -> None:
    old = TokenIssuer.from_settings(Knobs(SEC_TOKEN_BLACKLIST_EXPR='sub =?= "alice@pool.example"'),
                                    "pool.example")  # fmt: skip
    with pytest.raises(TokenRefusedError, match="revoked"):
        old.check(token("alice").header_payload)
    assert TokenIssuer.from_settings(Knobs(), "d").revocation is None
    with pytest.raises(ConfigError, match="SEC_TOKEN_REVOCATION_EXPR: cannot parse"):
        TokenIssuer.from_settings(Knobs(SEC_TOKEN_REVOCATION_EXPR="sub =?= ("), "d")


# ----- the whole handshake: execd's CommandServer with IDTOKENS ----------------------
ECHO = 60020


async def _echo(channel: Channel, command: int, peer: Peer) -> None:
    dec = channel.decoder(await channel.recv())
    dec.get_string()
    dec.finish()
    await channel.send(channel.encoder().put_string(f"{peer.user} {peer.method}").payload())


@pytest_asyncio.fixture
async def token_server(issuer: TokenIssuer) -> AsyncIterator[CommandServer]:
    security = ServerSecurity(domain="uid.example", methods=("FS", "IDTOKENS"), tokens=issuer,
                              timeout_s=2,
                              authorize=lambda _cmd, peer: peer.user != "carol@pool.example")
    srv = CommandServer({ECHO: _echo, Command.DRAIN_JOBS: _echo}, security)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.close()


async def _call(srv: CommandServer, presented: IdToken, command: int = ECHO) -> str:
    client = ClientSecurity(methods=("IDTOKENS",), token=presented, timeout_s=2)
    channel, _ = await open_command(parse_sinful(srv.address), command, client)
    try:
        await channel.send(channel.encoder().put_string("hi").payload())
        return channel.decoder(await channel.recv()).get_string()
    finally:
        await channel.close()


@pytest.mark.asyncio
async def test_the_server_maps_a_token_to_its_identity(token_server: CommandServer) -> None:
    assert await _call(token_server, token("alice")) == "alice@pool.example IDTOKENS"
    # FS still works beside it (same host)
    channel, _ = await open_command(parse_sinful(token_server.address), ECHO,
                                    ClientSecurity(timeout_s=2))  # fmt: skip
    try:
        await channel.send(channel.encoder().put_string("hi").payload())
        assert channel.decoder(await channel.recv()).get_string() == \
            f"{getpass.getuser()}@uid.example FS"
    finally:
        await channel.close()


@pytest.mark.asyncio
async def test_the_server_refuses_bad_tokens_scopes_and_identities(
    token_server: CommandServer,
) -> None:
    with capture_logs() as events:
        with pytest.raises(ProtocolError):
            await _call(token_server, altered("alice"))
        await token_server.wait_idle()
        with pytest.raises(ProtocolError):
            await _call(token_server, token("bob_expired"))
        await token_server.wait_idle()
        with pytest.raises(NotAuthorizedError, match="DENIED"):  # scope READ: no DRAIN_JOBS
            await _call(token_server, token("admin_read_only"), Command.DRAIN_JOBS)
        with pytest.raises(NotAuthorizedError, match=r"carol@pool\.example"):  # the hook says no
            await _call(token_server, token("carol_site2"))
        await token_server.wait_idle()
    dropped = [e for e in events if e["event"] == "wire_connection_dropped"]
    assert "bad signature" in dropped[0]["reason"]
    assert "token expired" in dropped[1]["reason"]
    (limited,) = [e for e in events if e["event"] == "wire_command_refused"]
    assert limited["why"] == "token limited to READ" and limited["user"] == "admin@pool.example"
    text = repr(events)
    assert not [t for t in TOKENS.values() if t.split(".")[2] in text]
    # the server still serves
    assert await _call(token_server, token("alice")) == "alice@pool.example IDTOKENS"


# ----- bad input: a client that sends garbage in the token exchange ------------------
def _client_messages() -> list[bytes]:
    presented = token("alice")
    me = presented.subject
    one = Encoder().put_int(0).put_int(len(me)).put_string(me)
    one.put_string(presented.header_payload).put_int(256).put_bytes(bytes(256))
    two = Encoder().put_int(0).put_int(len(me)).put_string(me)
    two.put_int(256).put_bytes(bytes(256)).put_int(20).put_bytes(bytes(20))
    return [one.payload(), two.payload()]


@st.composite
def _mutated(draw: st.DrawFn) -> list[bytes]:
    messages = [bytearray(m) for m in _client_messages()]
    for _ in range(draw(st.integers(1, 4))):
        which = messages[draw(st.integers(0, 1))]
        if not which:
            continue
        pos = draw(st.integers(0, len(which) - 1))
        kind = draw(st.sampled_from(["flip", "cut", "insert"]))
        if kind == "flip":
            which[pos] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del which[pos:]
        else:
            which[pos:pos] = draw(st.binary(min_size=1, max_size=9))
    return [bytes(m) for m in messages if m]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(st.one_of(_mutated(), st.lists(st.binary(min_size=1, max_size=300), max_size=2)))
def test_garbage_in_the_token_exchange_is_only_a_protocol_error(issuer: TokenIssuer,
                                                                messages: list[bytes]) -> None:
    async def run() -> None:
        channel, raw = await raw_pair(timeout_s=0.3)
        try:
            raw.write(b"".join(struct.pack("!BI", 1, len(m)) + m for m in messages))
            raw.write_eof()
            with pytest.raises(ProtocolError):  # a refusal, a bad message, or a deadline
                await serve_token(channel, issuer)
        finally:
            raw.close()
            await channel.close()

    asyncio.run(run())
