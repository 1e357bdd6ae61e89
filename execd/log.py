"""Structured logging: events with key/values, context bound through contextvars.

Production output is JSON lines (a file under LOG, or stderr for journald); a person at
a terminal gets structlog's console renderer. Secrets never reach the output: any key
that names a secret (claim ids, capabilities, keys, tokens, passwords) is redacted, and
so is any value that looks like an HTCondor claim id, wherever it appears.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import structlog

__all__ = [
    "REDACTED",
    "bind_context",
    "configure",
    "get_logger",
    "redact_secrets",
    "reopen",
]

REDACTED = "<redacted>"

# Keys whose values are secrets, compared case-insensitively after removing '_' and '-'.
_SECRET_KEYS = frozenset(
    {
        "claimid",
        "claim",
        "capability",
        "childclaimids",
        "secret",
        "key",
        "sessionkey",
        "transferkey",
        "token",
        "password",
        "passwd",
        "privatekey",
    }
)

# An HTCondor claim id: <addr>#<birthday>#<seq>#[sec-info]<hex>; also bare long hex keys.
_CLAIM_ID_RE = re.compile(r"<[^<>\s]*>#\d+#\d+#[^\s\"']*")
_LONG_HEX_RE = re.compile(r"\b[0-9a-fA-F]{32,}\b")


def _is_secret_key(key: str) -> bool:
    norm = key.lower().replace("_", "").replace("-", "")
    return norm in _SECRET_KEYS or norm.endswith(("claimid", "secret", "token", "password"))


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        value = _CLAIM_ID_RE.sub(REDACTED, value)
        return _LONG_HEX_RE.sub(REDACTED, value)
    if isinstance(value, dict):
        return {k: (REDACTED if _is_secret_key(str(k)) else _scrub(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    return value


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: replace secret-named keys and claim-id-shaped values."""
    for key in list(event_dict):
        if _is_secret_key(key):
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _scrub(event_dict[key])
    return event_dict


class _Sink:
    """Where rendered lines go: a file (reopenable for logrotate) or a stream."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self.stream: TextIO = sys.stderr

    def open(self, path: Path | None) -> None:
        self.close()
        self.path = path
        if path is None:
            self.stream = sys.stderr
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.stream = path.open("a", encoding="utf-8", buffering=1)

    def reopen(self) -> None:
        self.open(self.path)

    def close(self) -> None:
        if self.path is not None and not self.stream.closed:
            self.stream.close()

    def write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


_sink = _Sink()


class _SinkLogger:
    def msg(self, message: str) -> None:
        _sink.write(message)

    log = debug = info = warning = warn = error = critical = exception = msg


def _sink_factory(*_args: Any) -> _SinkLogger:
    return _SinkLogger()


_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def configure(*, level: str = "info", fmt: str = "json", path: Path | None = None) -> None:
    """Configure logging for the process.

    ``fmt`` is ``json`` (one object per line) or ``console`` (for a person);
    ``path`` is a log file, or None for stderr.
    """
    if level.lower() not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(_LEVELS)}")
    if fmt not in ("json", "console"):
        raise ValueError(f"unknown log format {fmt!r}; use json or console")
    _sink.open(path)
    renderer: Any = (
        structlog.processors.JSONRenderer(sort_keys=False)
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redact_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level.lower()]),
        logger_factory=_sink_factory,
        cache_logger_on_first_use=False,
    )


def reopen() -> None:
    """Reopen the log file (SIGUSR1, after logrotate moved it)."""
    _sink.reopen()


def get_logger(name: str | None = None) -> Any:
    log = structlog.get_logger()
    return log.bind(logger=name) if name else log


@contextmanager
def bind_context(**values: Any) -> Iterator[None]:
    """Bind slot/claim/job context for every event logged inside the block."""
    tokens = structlog.contextvars.bind_contextvars(**values)
    try:
        yield
    finally:
        structlog.contextvars.reset_contextvars(**tokens)
