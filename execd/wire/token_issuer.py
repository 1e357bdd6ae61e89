"""What a server knows and checks of an IDTOKEN: the pool's signing keys and the claims.

HTCondor signs an IDTOKEN (HS256, a JWT) with a key derived from a signing-key file:
  POOL (or no kid): SEC_TOKEN_POOL_SIGNING_KEY_FILE, its bytes doubled (kept so that
                    tokens from before 8.9.12 still verify);
  any other kid:    SEC_PASSWORD_DIRECTORY/<kid>.
Every file is XOR-scrambled with DE AD BE EF (HTCondor's simple_scramble); the JWT key
is HKDF-SHA256(key, salt "htcondor", info "master jwt", 32 bytes). The client never
sends the signature: the server re-signs header.payload and both sides prove they hold
the same signature in the challenge/response (auth_token.py). A token signed with any
other key therefore fails the proof.

Before that, the claims are checked as a 25.x server does (analyze_token): not expired,
not older than SEC_TOKEN_MAX_AGE, an issuer, a jti, a subject (capability tokens, which
need the issuer's database, are refused). execd also refuses a token whose issuer is
not its TRUST_DOMAIN: HTCondor's clients only present tokens of the server's trust
domain, so a foreign issuer is a token from another pool. `scope` entries
`condor:/<LEVEL>` limit what the identity may do (LimitAuthorization).

SEC_TOKEN_REVOCATION_EXPR (or its old name SEC_TOKEN_BLACKLIST_EXPR) is evaluated, as
HTCondor does, against an ad of the payload's scalar claims (sub, iss, jti, iat, exp,
...): true revokes the token; so does a value that is not boolean-like (undefined,
error, a string), out of caution, as HTCondor's Condor_Auth_Passwd decides.

Keys are read when a token arrives (a rotated key file needs no restart) and never
logged; errors name the file and the problem, never a key or a signature.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from execd.classads import ClassAdError, Value, evaluate, new_ad, parse_expr
from execd.errors import ConfigError
from execd.wire.auth_fs import AuthenticationFailedError

POOL_KEY_ID = "POOL"
SCRAMBLE = bytes.fromhex("deadbeef")
JWT_KEY_BYTES = 32
MAX_KEY_FILE_BYTES = 1 << 20
_HASHES = {"HS256": hashlib.sha256, "HS384": hashlib.sha384, "HS512": hashlib.sha512}
SCOPE_PREFIX = "condor:/"


class TokenRefusedError(AuthenticationFailedError):
    """The peer's token is not one execd accepts (the message says why, without secrets)."""


@dataclass(frozen=True)
class TokenClaims:
    """What a valid token says about its holder."""

    subject: str
    issuer: str
    key_id: str
    token_id: str
    algorithm: str
    limits: frozenset[str] | None  # authorization levels from its scope; None: unlimited
    expires: int | None


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def unscramble(data: bytes) -> bytes:
    return bytes(b ^ SCRAMBLE[i % 4] for i, b in enumerate(data))


@dataclass(frozen=True)
class TokenIssuer:
    """The pool's token authority as a server sees it (execd never issues tokens)."""

    trust_domain: str
    pool_key_file: str = ""
    password_directory: str = ""
    max_age_s: int | None = None
    revocation: Any = None  # SEC_TOKEN_REVOCATION_EXPR, parsed (an ExprTree), or None

    @classmethod
    def from_settings(cls, settings: Any, domain: str) -> TokenIssuer:
        """From the config: TRUST_DOMAIN (else `domain`), the key files, the limits."""
        revocation = None
        for name in ("SEC_TOKEN_REVOCATION_EXPR", "SEC_TOKEN_BLACKLIST_EXPR"):
            if text := (settings.get_str(name) or "").strip():
                try:
                    revocation = parse_expr(text)
                except ClassAdError as exc:
                    raise ConfigError(f"{name}: {exc}") from None
                break
        return cls(trust_domain=settings.get_str("TRUST_DOMAIN") or domain,
                   pool_key_file=settings.get_str("SEC_TOKEN_POOL_SIGNING_KEY_FILE") or "",
                   password_directory=settings.get_str("SEC_PASSWORD_DIRECTORY") or "",
                   max_age_s=settings.get_int("SEC_TOKEN_MAX_AGE"),
                   revocation=revocation)  # fmt: skip

    def key_names(self) -> list[str]:
        """The kids execd can verify (the IssuerKeys it advertises), sorted."""
        names = set()
        if self.pool_key_file and os.access(self.pool_key_file, os.R_OK):
            names.add(POOL_KEY_ID)
        if self.password_directory:
            directory = Path(self.password_directory)
            with contextlib.suppress(OSError):  # no directory: no named keys
                names.update(p.name for p in directory.iterdir()
                             if p.is_file() and os.access(p, os.R_OK))  # fmt: skip
        return sorted(names)

    def signing_key(self, key_id: str) -> bytes:
        if key_id in ("", POOL_KEY_ID):
            path, doubled = self.pool_key_file, True
            if not path:
                raise TokenRefusedError("token signed with the POOL key; execd has no "
                                        "SEC_TOKEN_POOL_SIGNING_KEY_FILE")  # fmt: skip
        else:
            if not self.password_directory:
                raise TokenRefusedError(f"token signed with key {key_id!r}; execd has no "
                                        "SEC_PASSWORD_DIRECTORY")  # fmt: skip
            if "/" in key_id or key_id in (".", ".."):
                raise TokenRefusedError("token's key id is not a file name")
            path, doubled = os.path.join(self.password_directory, key_id), False
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as exc:
            raise TokenRefusedError(f"token signed with key {key_id!r}, which execd cannot "
                                    f"read ({path}: {exc.strerror})") from None  # fmt: skip
        if not raw or len(raw) > MAX_KEY_FILE_BYTES:
            raise TokenRefusedError(f"signing key file {path} is empty or too large")
        key = unscramble(raw)
        return key + key if doubled else key

    def signature(self, claims: TokenClaims, header_payload: str) -> bytes:
        """The signature the token must carry (the issuer's HMAC over header.payload)."""
        key = self.signing_key(claims.key_id)
        jwt_key = HKDF(algorithm=hashes.SHA256(), length=JWT_KEY_BYTES, salt=b"htcondor",
                       info=b"master jwt").derive(key)  # fmt: skip
        digest = _HASHES[claims.algorithm]
        return hmac.new(jwt_key, header_payload.encode("ascii"), digest).digest()

    def check(self, header_payload: str, now: float | None = None) -> TokenClaims:
        """The claims of a presented header.payload, or TokenRefusedError saying why."""
        now = time.time() if now is None else now
        header, payload = _decode(header_payload)
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in _HASHES:
            raise TokenRefusedError(f"token is signed with {algorithm!r}, not HS256/384/512")
        if not isinstance(kid, str) or not kid:
            raise TokenRefusedError("token names no signing key (kid)")
        issuer, jti, subject = payload.get("iss"), payload.get("jti"), payload.get("sub")
        exp, iat = payload.get("exp"), payload.get("iat")
        if isinstance(exp, int | float) and now > exp:
            raise TokenRefusedError(f"token expired {int(now - exp)} s ago")
        if self.max_age_s is not None and isinstance(iat, int | float) \
                and now - iat > self.max_age_s:  # fmt: skip
            raise TokenRefusedError(f"token is {int(now - iat)} s old; SEC_TOKEN_MAX_AGE "
                                    f"is {self.max_age_s}")  # fmt: skip
        if not isinstance(issuer, str) or not issuer:
            raise TokenRefusedError("token has no issuer (iss)")
        if issuer != self.trust_domain:
            raise TokenRefusedError(f"token issued by {issuer!r}, not by this pool's trust "
                                    f"domain {self.trust_domain!r}")  # fmt: skip
        if not isinstance(jti, str) or not jti:
            raise TokenRefusedError("token has no id (jti)")
        if payload.get("cap") is True or not isinstance(subject, str) or not subject:
            raise TokenRefusedError("capability tokens (no subject) are not supported")
        if self.revocation is not None and _revoked(self.revocation, payload):
            raise TokenRefusedError("token is revoked by SEC_TOKEN_REVOCATION_EXPR")
        scope = payload.get("scope", "")
        levels = {s[len(SCOPE_PREFIX):] for s in str(scope).replace(",", " ").split()
                  if s.startswith(SCOPE_PREFIX)}  # fmt: skip
        return TokenClaims(subject, issuer, kid, jti, str(algorithm),
                           frozenset(levels) if levels else None,
                           int(exp) if isinstance(exp, int | float) else None)  # fmt: skip


def _revoked(expr: Any, payload: dict[str, Any]) -> bool:
    claims = new_ad({k: v for k, v in payload.items()
                     if isinstance(v, bool | int | float | str)})  # fmt: skip
    value = evaluate(expr, claims)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and not isinstance(value, Value):
        return value != 0
    return True  # undefined, error or not boolean-like: revoked, out of caution


def _decode(header_payload: str) -> tuple[dict[str, Any], dict[str, Any]]:
    parts = header_payload.split(".")
    if len(parts) != 2:
        raise TokenRefusedError("presented token is not a JWT's header.payload")
    try:
        header, payload = (json.loads(_b64url(p)) for p in parts)
    except (binascii.Error, ValueError):
        raise TokenRefusedError("presented token is not a JWT's header.payload") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise TokenRefusedError("token's header or payload is not a JSON object")
    return header, payload
