"""What every subcommand shares: finding and loading the configuration."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from execd.config.loader import Config, load_config
from execd.config.settings import Settings, load_settings
from execd.config.sources import find_config_file
from execd.errors import ConfigError


def load(args: argparse.Namespace, *, validate: bool = True) -> tuple[Config, Settings]:
    """Load the config named by --config / CONDOR_CONFIG / the defaults."""
    path = find_config_file(getattr(args, "config", None))
    config = load_config(path)
    settings = load_settings(config) if validate else Settings(config)
    return config, settings


def control_socket(args: argparse.Namespace) -> Path:
    """The running daemon's control socket. The config is read, not validated: a config
    being edited must not stop a client from reaching the daemon."""
    from execd.daemon.node import Paths  # noqa: PLC0415 - only the clients need it

    _config, settings = load(args, validate=False)
    return Paths.from_settings(settings).socket


def fail(error: ConfigError, code: int = 1) -> int:
    print(f"execd: {error}", file=sys.stderr)
    return code
