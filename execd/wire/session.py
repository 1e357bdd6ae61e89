"""Security sessions a client holds, cached by id and by (daemon address, command).

A session comes out of one DC_AUTHENTICATE handshake (security.py): its id (Sid), its
AES-256-GCM key, the identity the server mapped us to, and the commands the server
said the session may carry (ValidCommands). Later commands to the same daemon resume it
(UseSession = "YES", Sid, a fresh Nonce) with no authentication round trips. A session
expires after the server's SessionDuration; a server that answers SID_NOT_FOUND makes
the client forget it. Keys never appear in repr() or logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Session:
    sid: str
    key: bytes = field(repr=False)
    connect_addr: str
    user: str
    auth_method: str
    valid_commands: frozenset[int]
    remote_version: str
    expires_at: float | None  # monotonic seconds; None: no expiry announced


def parse_commands(text: str) -> frozenset[int]:
    return frozenset(int(c) for c in text.replace(" ", "").split(",") if c.strip().isdigit())


class SessionCache:
    """Sessions by id, and which session serves a (daemon address, command)."""

    def __init__(self) -> None:
        self._by_sid: dict[str, Session] = {}
        self._by_command: dict[tuple[str, int], str] = {}

    def __len__(self) -> int:
        return len(self._by_sid)

    def store(self, session: Session, command: int) -> None:
        self._by_sid[session.sid] = session
        for cmd in session.valid_commands | {command}:
            self._by_command[(session.connect_addr, cmd)] = session.sid

    def lookup(self, connect_addr: str, command: int, now: float) -> Session | None:
        sid = self._by_command.get((connect_addr, command))
        if sid is None:
            return None
        session = self._by_sid.get(sid)
        if session is None or (session.expires_at is not None and session.expires_at <= now):
            self.invalidate(sid)
            return None
        return session

    def sessions(self) -> list[Session]:
        return list(self._by_sid.values())

    def get(self, sid: str) -> Session | None:
        return self._by_sid.get(sid)

    def invalidate(self, sid: str) -> None:
        self._by_sid.pop(sid, None)
        for key in [k for k, v in self._by_command.items() if v == sid]:
            del self._by_command[key]
