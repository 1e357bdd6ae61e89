"""IDTOKENS pieces that need no server: parsing a token, its key, the name it travels
under, and refusals that name the mismatch without showing the token."""

from __future__ import annotations

import base64
import json

import pytest

from execd.errors import ConfigError
from execd.wire.auth_fs import AuthenticationFailedError
from execd.wire.auth_token import SEED_K, check_server_offer, parse_token, token_key
from execd.wire.security import ClientSecurity, _policy_ad
from execd.wire.sinful import parse_sinful


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(header: dict[str, object], payload: dict[str, object], sig: bytes = b"S" * 32) -> str:
    return ".".join([_b64(json.dumps(header).encode()), _b64(json.dumps(payload).encode()),
                     _b64(sig)])  # fmt: skip


GOOD = _jwt({"alg": "HS256", "kid": "POOL"}, {"sub": "condor@vm", "iss": "vm", "iat": 1})


def test_parse_token_as_condor_token_create_writes_it() -> None:
    token = parse_token(GOOD + "\n")
    assert (token.subject, token.issuer, token.key_id) == ("condor@vm", "vm", "POOL")
    assert token.signature == b"S" * 32
    assert token.header_payload == GOOD.rsplit(".", 1)[0]
    assert "SSSS" not in repr(token) and GOOD not in repr(token)
    assert GOOD not in repr(ClientSecurity(token=token))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not-a-jwt", "not a JWT"),
        ("a.b.c", "not a JWT"),
        (_jwt({"alg": "RS256", "kid": "POOL"}, {"sub": "a", "iss": "b"}), "RS256"),
        (_jwt({"alg": "HS256"}, {"sub": "a", "iss": "b"}), "key id"),
        (_jwt({"alg": "HS256", "kid": "K"}, {"iss": "b"}), "subject"),
    ],
)
def test_bad_tokens_are_config_errors(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_token(text)


def test_key_depends_on_signature_and_token() -> None:
    base = parse_token(GOOD)
    header = {"alg": "HS256", "kid": "POOL"}
    other_sig = parse_token(_jwt(header, {"sub": "condor@vm", "iss": "vm", "iat": 1}, b"T" * 32))
    other_sub = parse_token(_jwt(header, {"sub": "x@vm", "iss": "vm", "iat": 1}))
    keys = {token_key(t) for t in (base, other_sig, other_sub)}
    assert len(keys) == 3 and all(len(k) == 32 for k in keys)
    assert len(SEED_K) == 256


def test_server_that_cannot_know_the_key_is_named() -> None:
    token = parse_token(GOOD)
    check_server_offer(token, "vm", "POOL,OTHER")
    with pytest.raises(AuthenticationFailedError, match="trust domain is 'elsewhere'"):
        check_server_offer(token, "elsewhere", "POOL")
    with pytest.raises(AuthenticationFailedError, match=r"the server has \['K2'\]"):
        check_server_offer(token, "vm", "K2")


def test_idtokens_travels_as_token_in_the_policy_ad() -> None:
    security = ClientSecurity(methods=("FS", "IDTOKENS"), token=parse_token(GOOD))
    ad = _policy_ad(parse_sinful("<127.0.0.1:1>"), 0, security, "pubkey")
    assert ad["AuthMethods"] == '"FS,TOKEN"'
