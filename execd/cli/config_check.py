"""`execd config-check [FILE]`: validate a configuration without starting anything."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from execd.config.loader import load_config
from execd.config.settings import load_settings
from execd.config.sources import find_config_file
from execd.errors import ConfigError
from execd.wire.authz_policy import policy_from_settings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "config-check",
        help="check a configuration file (syntax, macros, knob types, ClassAd expressions, "
        "ALLOW_/DENY_ entries)",
        description="Read FILE (or the active configuration) the way the daemon would, "
        "and report every problem with its file and line. Exit 0 when it is good.",
    )
    parser.add_argument("file", nargs="?", metavar="FILE")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        path = Path(args.file) if args.file else find_config_file(args.config)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        config = load_config(path)
        policy_from_settings(load_settings(config))  # ALLOW_<LEVEL>/DENY_<LEVEL> entries
    except ConfigError as exc:
        print(f"execd: {exc}", file=sys.stderr)
        return 1
    for warning in config.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"OK: {path} ({len(config.files)} file(s), {len(config.names())} names)")
    return 0

