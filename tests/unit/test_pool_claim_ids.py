"""Claim ids carry the session policy a real schedd reads: ShortVersion (execd's
version, as its handshakes announce it) and CryptoMethodsList."""

from __future__ import annotations

from execd.claims.ids import SHORT_VERSION, ClaimIdFactory, parse_claim_id
from execd.wire.claim_session import claim_session
from execd.wire.security import CONDOR_VERSION


def test_claim_id_session_info_names_execds_version_and_crypto() -> None:
    claim = ClaimIdFactory("<127.0.0.1:9?sock=execd>", 1700000000, lambda n: "ab" * n).new()
    info = claim_session(claim).info
    assert info["ShortVersion"] == SHORT_VERSION
    assert CONDOR_VERSION.split()[1] == SHORT_VERSION
    assert info["CryptoMethods"] == "AES" and info["CryptoMethodsList"] == "AES"
    assert info["Encryption"] == "YES" and info["Integrity"] == "YES"
    # the secret still parses out, and stays out of str()
    assert parse_claim_id(claim.full()).secret == "ab" * 32
    assert "ab" * 32 not in str(claim) + repr(claim)
