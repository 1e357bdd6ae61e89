"""Logging configured from settings: EXECD_LOG, EXECD_LOG_LEVEL, EXECD_LOG_FORMAT,
EXECD_LOG_MAX_BYTES."""

from __future__ import annotations

from pathlib import Path

from execd import log
from execd.config.settings import Settings
from execd.errors import ConfigError

STDERR_NAMES = ("-", "stderr", "STDERR")


def log_destination(settings: Settings) -> Path | None:
    text = settings.get_str("EXECD_LOG")
    return None if text is None or text in STDERR_NAMES else Path(text)


def configure_logging(settings: Settings, *, force_stderr: bool = False) -> None:
    """Apply the log knobs; a bad level/format or an unwritable file is a ConfigError."""
    path = None if force_stderr else log_destination(settings)
    level = settings.get_str("EXECD_LOG_LEVEL") or "info"
    fmt = settings.get_str("EXECD_LOG_FORMAT") or "json"
    max_bytes = settings.get_int("EXECD_LOG_MAX_BYTES") or 0
    try:
        log.configure(level=level, fmt=fmt, path=path, max_bytes=max_bytes)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"cannot write the log file {path}: {exc.strerror}") from None
