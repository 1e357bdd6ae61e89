"""Pool mode's settings: which pool this node joins and how (execd/daemon/pool.py).

The pool is COLLECTOR_HOST's (or CONDOR_HOST's); none set means standalone. The command
port (EXECD_COMMAND_ADDRESS) or the host's condor_shared_port (EXECD_SHARED_PORT), the
domains, the IDTOKEN this node presents (EXECD_POOL_TOKEN_FILE, else the first file of
SEC_TOKEN_DIRECTORY), the signing keys that verify its peers' tokens, and who may send
which command (ALLOW_<LEVEL>/DENY_<LEVEL>). A problem in any of them is a ConfigError
naming the knob.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execd.daemon.startd_daemon_ad import daemon_ad_mode
from execd.errors import ConfigError, ExecdError
from execd.wire.auth_token import IdToken, parse_token
from execd.wire.authz_policy import AuthzPolicy, policy_from_settings
from execd.wire.shared_port import endpoint_address
from execd.wire.sinful import Sinful, collector_address
from execd.wire.token_issuer import TokenIssuer


@dataclass(frozen=True)
class PoolSettings:
    collector: Sinful
    listen_host: str
    listen_port: int
    domain: str
    filesystem_domain: str
    interval_s: float
    authz: AuthzPolicy  # ALLOW_<LEVEL>/DENY_<LEVEL> (execd.wire.authz_policy)
    token: IdToken | None = field(default=None, repr=False)
    tokens: TokenIssuer | None = None  # verifies the IDTOKENS peers present
    # Behind this host's condor_shared_port: (its endpoint address, id, socket dir).
    shared_port: tuple[str, str, str] | None = None


def _token(settings: Any) -> IdToken | None:
    path = settings.get_str("EXECD_POOL_TOKEN_FILE") or ""
    if not path:
        directory = settings.get_str("SEC_TOKEN_DIRECTORY") or ""
        if directory and Path(directory).is_dir():
            files = sorted(p for p in Path(directory).iterdir() if p.is_file())
            path = str(files[0]) if files else ""
    if not path:
        return None
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"EXECD_POOL_TOKEN_FILE {path}: {exc.strerror}") from None
    return parse_token(text, where=f"token file {path}")


def pool_settings(settings: Any) -> PoolSettings | None:
    """The pool this node joins, or None (no COLLECTOR_HOST/CONDOR_HOST: standalone)."""
    collector = (settings.get_str("COLLECTOR_HOST") or "").strip()
    if not collector:
        return None
    try:
        address = collector_address(collector)
    except ExecdError as exc:
        raise ConfigError(f"COLLECTOR_HOST: {exc}") from None
    listen = settings.get_str("EXECD_COMMAND_ADDRESS") or "127.0.0.1:0"
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"EXECD_COMMAND_ADDRESS {listen!r} is not host:port")
    domain = settings.get_str("UID_DOMAIN") or "localdomain"
    daemon_ad_mode(settings.get_str("ENABLE_STARTD_DAEMON_AD"))  # a bad value stops startup
    shared_port = None
    if via := (settings.get_str("EXECD_SHARED_PORT") or "").strip():
        endpoint = settings.get_str("EXECD_SHARED_PORT_ID") or "execd"
        socket_dir = settings.get_str("DAEMON_SOCKET_DIR") or ""
        if socket_dir == "auto":  # as HTCondor's SharedPortEndpoint resolves it for files
            socket_dir = settings.config.expand("$(LOCK)/daemon_sock").strip()
        if not Path(socket_dir).is_dir():
            raise ConfigError(f"DAEMON_SOCKET_DIR {socket_dir!r} is not a directory (where "
                              "the shared port of EXECD_SHARED_PORT finds its endpoints)")
        shared_port = (endpoint_address(via, endpoint), endpoint, socket_dir)
    return PoolSettings(
        collector=address, listen_host=host, listen_port=int(port), domain=domain,
        filesystem_domain=settings.get_str("FILESYSTEM_DOMAIN") or domain,
        interval_s=float(settings.get_int("UPDATE_INTERVAL") or 300),
        authz=policy_from_settings(settings),
        token=_token(settings),
        tokens=TokenIssuer.from_settings(settings, domain),
        shared_port=shared_port,
    )  # fmt: skip
