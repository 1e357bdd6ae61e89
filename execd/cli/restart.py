"""`execd restart`: restart the daemon in place; running jobs keep running.

The daemon re-executes itself (same pid; see execd/daemon/restart.py) and the new
image re-adopts every running starter from the state store. This command waits until
the new daemon answers and says what it recovered. Exit codes as the admin commands:
0 restarted, 1 refused or it did not come back, 2 bad configuration, 4 no daemon.
"""

from __future__ import annotations

import argparse
import sys

from execd.cli.admin import EXIT_NO_DAEMON
from execd.cli.common import control_socket
from execd.daemon.client import ControlClient, DaemonUnavailableError, wait_for_daemon
from execd.daemon.control import ControlError
from execd.errors import ConfigError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "restart",
        help="restart execd in place (like SIGUSR2); running jobs are re-adopted",
        description="Restart the daemon in place: it re-executes itself with the same pid "
        "and re-adopts every running job. Waits until it answers again.",
    )
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds to wait for the new daemon (default 60)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        socket_path = control_socket(args)
    except ConfigError as exc:
        print(f"execd restart: {exc}", file=sys.stderr)
        return 2
    try:
        with ControlClient(socket_path) as client:
            before = client.call("ping")
            client.call("restart")
        after = wait_for_daemon(socket_path, args.timeout, not_started_at=before["started"])
    except DaemonUnavailableError as exc:
        print(f"execd restart: {exc.message}", file=sys.stderr)
        return EXIT_NO_DAEMON if "not running" in exc.message else 1
    except ControlError as exc:
        print(f"execd restart: {exc.message} ({exc.code})", file=sys.stderr)
        return 1
    got = after.get("recovered") or {}
    print(f"execd restarted in place (pid {after['pid']}): {got.get('adopted', 0)} running "
          f"jobs re-adopted, {got.get('ended_meanwhile', 0)} ended meanwhile, "
          f"{got.get('claims', 0)} claims restored")
    return 0
