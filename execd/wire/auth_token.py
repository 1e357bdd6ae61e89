"""IDTOKENS authentication, both sides (HTCondor's condor_auth_passwd.cpp, version 2):
what multi-host pools use. The node holds a JWT from `condor_token_create`, signed by the
pool's key (HS256); it proves it holds the token's signature without sending it.

  C: int 0, int len(a), a (the token's subject), the token's header.payload,
     int 256, 256 random bytes ra
  S: int status, int len(a), a, int len(b), b (the server's identity), int 256, ra,
     int 256, rb (its random bytes), int len(hkt), hkt
  C: int 0, int len(a), a, int 256, rb, int len(hk), hk

K = HKDF-SHA256(key = the JWT's raw signature, salt = SEED_K || header.payload,
info = "master ka", 32 bytes): the server re-signs header.payload with the pool key to
get the same K. hkt = HMAC-SHA1(K, "a b" NUL ra rb) proves the server knows the key;
hk = HMAC-SHA1(K, a NUL rb) proves we hold the token. SEED_K is the fixed 256-byte
salt of HTCondor's protocol (Condor_Auth_Passwd::setup_seed, "ka"): a protocol
constant, without which no implementation interoperates. The session key then comes
from ECDH as for every method.

The server (serve_token) re-signs header.payload with the pool's key (token_issuer.py)
after checking the token's claims, derives the same K, and checks hk: only a client
holding a signature made with that key can compute it. A refused token still gets the
server's message (status -1, empty fields) and the client's second message is read, so
the refusal is the server's to log, with its reason.

The token is a secret: it never appears in repr(), errors or logs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from execd.errors import ConfigError, RemoteProtocolError
from execd.wire.auth_fs import AuthenticationFailedError
from execd.wire.channel import Channel
from execd.wire.crypto import KEY_BYTES
from execd.wire.token_issuer import TokenClaims, TokenIssuer, TokenRefusedError

RANDOM_BYTES = 256
MAX_NAME_BYTES = 1024
MAX_MAC_BYTES = 64  # EVP_MAX_MD_SIZE
SEED_K = bytes.fromhex(
    "3e4a502047d5f4e5dc7c69bb5210cbb6167add8084f7dd9ef3ad2cca71d283dd"
    "114a4fbb7b1ee90adfa862c44304de5473a3172f735c2cbb6e775b5d40d39fac"
    "e873182523f9252b623be0d4b167a3a8040cacfee9ee3da02c0abbf4d9d8b11f"
    "89004c943923ce5d9508bb3f04bc66a3fa20a13a416c5e6f4e0d3187d45fc783"
    "35c5e485db2c5a3717970cc26e7b6b9d1965b47a67df77a31f22f08a6c0ba570"
    "97a21a9ca7c60424f72739ab5cb915a4185bd109828e35e42108ab851c08a3df"
    "fde0e3b06f3d3938cdad6df6ef9a6f6dc2cb74f0228512eb7a3d6823010684b0"
    "15c12ac3014c4f9f938e384dad1e3bd745ff8c141fd70b465ba8af5d1b98b4b1"
)


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


@dataclass(frozen=True)
class IdToken:
    """A parsed IDTOKEN (JWT); `text` is the whole secret token."""

    text: str = field(repr=False)
    header_payload: str = field(repr=False)
    signature: bytes = field(repr=False)
    subject: str
    issuer: str
    key_id: str


def parse_token(text: str, where: str = "token") -> IdToken:
    """A JWT as condor_token_create writes it; ConfigError naming `where` if it is not."""
    raw = text.strip()
    parts = raw.split(".")
    if len(parts) != 3:
        raise ConfigError(f"{where} is not a JWT (header.payload.signature)")
    try:
        header: Any = json.loads(_b64url(parts[0]))
        payload: Any = json.loads(_b64url(parts[1]))
        signature = _b64url(parts[2])
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where} is not a JWT: {exc}") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise ConfigError(f"{where} is not a JWT: header or payload is not an object")
    if header.get("alg") != "HS256":
        raise ConfigError(f"{where} is signed with {header.get('alg')!r}; execd speaks HS256")
    subject, issuer, kid = payload.get("sub"), payload.get("iss"), header.get("kid")
    if not all(isinstance(v, str) and v for v in (subject, issuer, kid)):
        raise ConfigError(f"{where} lacks a subject (sub), issuer (iss) or key id (kid)")
    return IdToken(raw, parts[0] + "." + parts[1], signature, str(subject), str(issuer),
                   str(kid))  # fmt: skip


def token_key(token: IdToken) -> bytes:
    """K, the key of the challenge/response (see the module doc)."""
    salt = SEED_K + token.header_payload.encode("ascii")
    return HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt,
                info=b"master ka").derive(token.signature)  # fmt: skip


def _mac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha1).digest()


def check_server_offer(token: IdToken, trust_domain: str | None, issuer_keys: str | None) -> None:
    """Fail early, naming the mismatch, when the server cannot know our token's key."""
    if trust_domain and token.issuer != trust_domain:
        raise AuthenticationFailedError(
            f"token issued by {token.issuer!r}; the server's trust domain is {trust_domain!r}"
        )
    keys = {k.strip() for k in (issuer_keys or "").split(",") if k.strip()}
    if keys and token.key_id not in keys:
        raise AuthenticationFailedError(
            f"token signed with key {token.key_id!r}; the server has {sorted(keys)}"
        )


async def _send_failure(channel: Channel) -> None:
    enc = channel.encoder().put_int(-1).put_int(0).put_string("").put_int(0).put_int(0)
    await channel.send(enc.payload())


async def authenticate_token(channel: Channel, token: IdToken) -> str:
    """Run the client side; the server's identity, or AuthenticationFailedError."""
    me = token.subject
    ra = os.urandom(RANDOM_BYTES)
    enc = channel.encoder().put_int(0).put_int(len(me.encode())).put_string(me)
    enc.put_string(token.header_payload).put_int(RANDOM_BYTES).put_bytes(ra)
    await channel.send(enc.payload())

    dec = channel.decoder(await channel.recv())
    status = dec.get_int("token server status")
    fields: dict[str, Any] = {}
    for name in ("a", "b"):
        dec.get_int(f"length of {name}")
        fields[name] = dec.get_string(f"token server {name}")
        if len(fields[name]) > MAX_NAME_BYTES:
            raise RemoteProtocolError(f"token server {name} is over {MAX_NAME_BYTES} bytes")
    for name, limit in (("ra", RANDOM_BYTES), ("rb", RANDOM_BYTES), ("hkt", MAX_MAC_BYTES)):
        length = dec.get_int(f"length of {name}")
        if not 0 <= length <= limit:
            raise RemoteProtocolError(f"token server sent {name} of {length} bytes")
        fields[name] = dec.get_bytes(length, name)
    dec.finish("token server message")
    if status != 0:
        await _send_failure(channel)
        raise AuthenticationFailedError(f"{channel.peer} refused our token (status {status})")
    key = token_key(token)
    a, b, rb = fields["a"], fields["b"], fields["rb"]
    expected = _mac(key, _raw(f"{a} {b}") + b"\0" + ra + rb)
    if (a != me or fields["ra"] != ra or len(rb) != RANDOM_BYTES
            or not hmac.compare_digest(fields["hkt"], expected)):  # fmt: skip
        await _send_failure(channel)
        raise AuthenticationFailedError(
            f"{channel.peer}'s token proof does not match: it does not hold the key that "
            "signed our token (or the token's signature was altered)"
        )
    hk = _mac(key, me.encode() + b"\0" + rb)
    enc = channel.encoder().put_int(0).put_int(len(me.encode())).put_string(me)
    enc.put_int(RANDOM_BYTES).put_bytes(rb).put_int(len(hk)).put_bytes(hk)
    await channel.send(enc.payload())
    return str(b)


# ----- server side ---------------------------------------------------------------------
# What a 25.x server calls itself in the exchange (CONDOR_PASSWORD_FQU); the client
# only feeds it into the HMAC.
SERVER_NAME = "condor@password"
STATUS_OK, STATUS_ERROR = 0, -1


def _raw(text: str) -> bytes:
    """A name's bytes as the peer sent them (the decoder keeps non-UTF-8 bytes)."""
    return text.encode("utf-8", "surrogateescape")


async def _server_message(channel: Channel, status: int, fields: list[bytes | str]) -> None:
    enc = channel.encoder().put_int(status)
    for value in fields:
        if isinstance(value, str):
            enc.put_int(len(_raw(value))).put_string(value)
        else:
            enc.put_int(len(value)).put_bytes(value)
    await channel.send(enc.payload())


async def serve_token(channel: Channel, issuer: TokenIssuer) -> TokenClaims:
    """Run the server side; the token's claims once the client proved it holds a token
    signed by one of the pool's keys, else TokenRefusedError/AuthenticationFailedError."""
    dec = channel.decoder(await channel.recv())
    status = dec.get_int("token client status")
    dec.get_int("length of a")
    a = dec.get_string("token client name")
    header_payload = dec.get_string("token header.payload")
    ra_len = dec.get_int("length of ra")
    if not 0 <= ra_len <= RANDOM_BYTES:
        raise RemoteProtocolError(f"token client sent ra of {ra_len} bytes")
    ra = dec.get_bytes(ra_len, "ra")
    dec.finish("token client message")
    refusal: AuthenticationFailedError | None = None
    claims: TokenClaims | None = None
    key = b""
    if status != STATUS_OK or ra_len != RANDOM_BYTES or len(a) > MAX_NAME_BYTES:
        refusal = AuthenticationFailedError(f"{channel.peer} gave up before presenting a token")
    else:
        try:
            claims = issuer.check(header_payload)
            signature = issuer.signature(claims, header_payload)
            key = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES,
                       salt=SEED_K + header_payload.encode("ascii"),
                       info=b"master ka").derive(signature)  # fmt: skip
        except AuthenticationFailedError as exc:
            refusal = exc
    rb = os.urandom(RANDOM_BYTES)
    if refusal is None:
        hkt = _mac(key, _raw(f"{a} {SERVER_NAME}") + b"\0" + ra + rb)
        await _server_message(channel, STATUS_OK, [a, SERVER_NAME, ra, rb, hkt])
    else:
        await _server_message(channel, STATUS_ERROR, ["", "", b"", b"", b""])

    dec = channel.decoder(await channel.recv())
    status = dec.get_int("token client status")
    dec.get_int("length of a")
    a2 = dec.get_string("token client name")
    fields = {}
    for name, limit in (("rb", RANDOM_BYTES), ("hk", MAX_MAC_BYTES)):
        length = dec.get_int(f"length of {name}")
        if not 0 <= length <= limit:
            raise RemoteProtocolError(f"token client sent {name} of {length} bytes")
        fields[name] = dec.get_bytes(length, name)
    dec.finish("token client proof")
    if refusal is not None:
        raise refusal
    assert claims is not None
    if status != STATUS_OK:
        raise TokenRefusedError(
            f"{channel.peer} could not verify execd's proof: its token for {claims.subject!r} "
            "is not signed by this pool's key (bad signature)"
        )
    expected = _mac(key, _raw(a) + b"\0" + rb)
    if a2 != a or fields["rb"] != rb or not hmac.compare_digest(fields["hk"], expected):
        raise TokenRefusedError(
            f"{channel.peer}'s proof for {claims.subject!r} does not match: its token is not "
            "signed by this pool's key (bad signature)"
        )
    if a != claims.subject:
        raise TokenRefusedError(f"{channel.peer} claims to be {a!r} with a token for "
                                f"{claims.subject!r}")  # fmt: skip
    return claims
