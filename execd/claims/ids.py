"""Claim ids: `<addr>#<birthday>#<seq>#[session attrs]<64 hex>` (HTCONDOR_WIRE.md).

The trailing 64 hex digits are the secret; str/repr show only the public session id.
The randomness source is a parameter so tests can be deterministic.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

# The session policy a claim id carries, as HTCondor's startd writes it. ShortVersion
# tells the schedd which protocol this execute point speaks (without it the schedd
# treats execd as an unknown, old version); CryptoMethodsList what it can encrypt with.
# The version is the one execd announces in every handshake (execd.wire.security).
SHORT_VERSION = "25.0.0"
SESSION_ATTRS = (f'[Integrity="YES";Encryption="YES";ShortVersion="{SHORT_VERSION}";'
                 'CryptoMethods="AES";CryptoMethodsList="AES";]')


@dataclass(frozen=True)
class ClaimId:
    address: str
    birthday: int
    sequence: int
    secret: str = field(repr=False)

    @property
    def session_id(self) -> str:
        """Everything before the last '#': safe to log."""
        return f"{self.address}#{self.birthday}#{self.sequence}"

    def full(self) -> str:
        """The whole claim id, secret included: only for the wire, never for logs."""
        return f"{self.session_id}#{SESSION_ATTRS}{self.secret}"

    def __str__(self) -> str:
        return self.session_id

    def __repr__(self) -> str:
        return f"ClaimId({self.session_id!r})"


class ClaimIdFactory:
    """Makes claim ids for one daemon: its address, birthday and a counter."""

    def __init__(
        self, address: str, birthday: int, token_hex: Callable[[int], str] = secrets.token_hex
    ) -> None:
        self._address = address
        self._birthday = birthday
        self._seq = 0
        self._token_hex = token_hex

    def new(self) -> ClaimId:
        self._seq += 1
        return ClaimId(self._address, self._birthday, self._seq, self._token_hex(32))


def parse_claim_id(text: str) -> ClaimId:
    """Parse a full claim id; ValueError (without the secret) when it is malformed."""
    parts = text.split("#", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError("malformed claim id")
    tail = parts[3]
    secret = tail[tail.rfind("]") + 1 :] if "]" in tail else tail
    if len(secret) != 64 or any(c not in "0123456789abcdef" for c in secret):
        raise ValueError("malformed claim id secret")
    return ClaimId(parts[0], int(parts[1]), int(parts[2]), secret)
