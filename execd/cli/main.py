"""The `execd` command: one entry point, one module per subcommand.

Each subcommand module exposes ``register(subparsers)``, which adds its parser and sets
``func`` (taking the parsed arguments, returning the exit code).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import execd
from execd import log

# Subcommand modules under execd.cli, in the order `execd --help` lists them.
SUBCOMMAND_MODULES: tuple[str, ...] = (
    "run", "status", "job", "admin", "restart", "config_val", "config_check",
    "service_stopped",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="execd",
        description="An HTCondor execute point (startd + starter) for Linux.",
    )
    parser.add_argument("--version", action="version", version=f"execd {execd.__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file (default: $CONDOR_CONFIG, then /etc/execd/execd_config, "
        "then the built-in default)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        module = importlib.import_module(f"execd.cli.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # Tools log warnings to stderr for a person; `execd run` reconfigures from settings.
    log.configure(level="warning", fmt="console", path=None)
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    code: int = func(args)
    return code
