"""Where a pool job finds its Chirp proxy (execd.wire.chirp_proxy): `.chirp.config` in
its sandbox, one line `<address> <port> <cookie>`, as condor_starter writes it.

The cookie is condor_starter's: COOKIE_LENGTH random lowercase letters, a secret that
a client must send first; it is never logged (ChirpAddress's repr leaves it out). The
file is the job's user's, mode 0600, made anew (O_EXCL, no link followed): one the
job's input brought is replaced, as condor_starter replaces it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import string
from dataclasses import dataclass
from pathlib import Path

from execd.wire.output_files import CHIRP_CONFIG

COOKIE_LENGTH = 31  # condor_starter: 31 random lowercase letters


@dataclass(frozen=True)
class ChirpAddress:
    """What `.chirp.config` says: where the proxy listens and its cookie (a secret)."""

    host: str
    port: int
    cookie: str

    def __repr__(self) -> str:
        return f"ChirpAddress({self.host}:{self.port})"

    def line(self) -> str:
        return f"{self.host} {self.port} {self.cookie}\n"

    def write(self, sandbox: Path, uid: int, gid: int) -> Path:
        """`.chirp.config` in the sandbox, readable by the job's user only."""
        path = sandbox / CHIRP_CONFIG
        with contextlib.suppress(FileNotFoundError):  # one the job's input brought: ours
            os.unlink(path)  # replaces it, as condor_starter's (a link is not followed)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchown(fd, uid, gid)
            os.write(fd, self.line().encode())
        finally:
            os.close(fd)
        return path


def new_cookie() -> str:
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(COOKIE_LENGTH))
