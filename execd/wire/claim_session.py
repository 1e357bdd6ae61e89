"""Claim-id security sessions: a claim id carries its own CEDAR session.

A claim id is `<startd address>#<birthday>#<seq>#[session info]<64 hex>`. Whoever holds
it (the startd that made it, the schedd and shadow it was handed to) builds the same
session without a handshake: the session id is everything before the last '#', the
AES-256-GCM key is HKDF-SHA256 over the 64 hex characters (salt "htcondor", info
"keygen"), as HTCondor's SecMan::CreateNonNegotiatedSecuritySession does. Every claim
command (REQUEST_CLAIM, ACTIVATE_CLAIM, ALIVE, RELEASE_CLAIM, ...) then resumes it.
The shadow's file transfer uses `filetrans.<session id>` with the same key.

Errors never include the secret: a claim id that does not parse is named by its
public part only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from execd.claims.ids import ClaimId, parse_claim_id
from execd.errors import RemoteProtocolError
from execd.wire.crypto import hkdf_key

# HTCondor's name for whoever holds a claim id (EXECUTE_SIDE_MATCHSESSION_FQU).
MATCH_SESSION_USER = "execute-side@matchsession"


@dataclass(frozen=True)
class ClaimSession:
    sid: str
    key: bytes = field(repr=False)
    info: dict[str, str]


def parse_session_info(text: str) -> dict[str, str]:
    """`[A="x";B="y";]` -> {"A": "x", "B": "y"} (the claim's session policy)."""
    inner = text.strip()
    if not (inner.startswith("[") and inner.endswith("]")):
        return {}
    out: dict[str, str] = {}
    for part in inner[1:-1].split(";"):
        name, sep, value = part.partition("=")
        if sep:
            out[name.strip()] = value.strip().strip('"')
    return out


def claim_session(claim_id: str | ClaimId) -> ClaimSession:
    """The session a claim id carries; RemoteProtocolError for a malformed claim id."""
    text = claim_id.full() if isinstance(claim_id, ClaimId) else claim_id
    try:
        parsed = parse_claim_id(text)
    except ValueError as exc:
        public = text.rsplit("#", 1)[0] if "#" in text else "(no '#')"
        raise RemoteProtocolError(f"claim id {public!r}: {exc}") from None
    private = text.rsplit("#", 1)[1]
    info = private[: private.rfind("]") + 1] if private.startswith("[") else ""
    return ClaimSession(sid=parsed.session_id, key=hkdf_key(parsed.secret.encode("ascii")),
                        info=parse_session_info(info))  # fmt: skip
