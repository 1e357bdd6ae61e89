"""`execd run`: start the daemon (foreground by default; `--daemon` detaches)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from execd.cli.common import fail, load
from execd.daemon.node import Paths
from execd.daemon.pidfile import AlreadyRunningError, PidFile
from execd.daemon.runtime import Daemon
from execd.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the execute point daemon",
        description="Run execd: detect the node, publish its slots, run jobs. In the "
        "foreground by default (as systemd's Type=notify wants); --daemon detaches. "
        "Signals: HUP reconfig, TERM/INT graceful shutdown (twice: fast), QUIT fast "
        "shutdown, USR1 reopen logs, USR2 restart in place.",
    )
    parser.add_argument("--daemon", action="store_true",
                        help="detach from the terminal (for hosts without systemd)")
    parser.add_argument("--stderr", action="store_true",
                        help="log to stderr whatever EXECD_LOG says")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        # Validate everything while errors can still reach the terminal.
        config, settings = load(args)
        paths = Paths.from_settings(settings)
        paths.create()
    except ConfigError as exc:
        return fail(exc, 2)
    config_path = config.files[0]
    if args.daemon:
        return _detached(config_path, paths, args.stderr)
    try:
        with PidFile(paths.pidfile):
            return _serve(config_path, args.stderr)
    except AlreadyRunningError as exc:
        print(f"execd: {exc}", file=sys.stderr)
        return 3


def _serve(config_path: str, log_to_stderr: bool) -> int:
    from pathlib import Path  # noqa: PLC0415

    daemon = Daemon(Path(config_path), log_to_stderr=log_to_stderr)
    try:
        daemon.start()
    except ConfigError as exc:
        return fail(exc, 2)
    return asyncio.run(daemon.serve())


def _detached(config_path: str, paths: Paths, log_to_stderr: bool) -> int:
    import daemon as python_daemon  # noqa: PLC0415  (only this mode needs it)

    pidfile = PidFile(paths.pidfile)
    try:
        pidfile.acquire()  # refuse before detaching, so the error reaches the terminal
    except AlreadyRunningError as exc:
        print(f"execd: {exc}", file=sys.stderr)
        return 3
    pidfile.release()
    context = python_daemon.DaemonContext(working_directory="/", umask=0o022)
    # The event loop is created only inside: DaemonContext closes every descriptor.
    with context, PidFile(paths.pidfile):
        return _serve(config_path, log_to_stderr)
