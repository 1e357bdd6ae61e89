"""Administration commands, each a thin client of the control socket:
`execd drain`, `execd vacate`, `execd reconfig`, `execd off`, `execd who`.

Exit codes a script can rely on: 0 done, 1 refused or failed (message on stderr),
2 bad usage or configuration, 4 no daemon running.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from execd.cli.common import control_socket
from execd.daemon.client import ControlClient, DaemonUnavailableError
from execd.daemon.control import ControlError
from execd.errors import ConfigError

EXIT_NO_DAEMON = 4


def call(args: argparse.Namespace, verb: str, payload: dict[str, Any]) -> tuple[int, Any]:
    try:
        with ControlClient(control_socket(args)) as client:
            return 0, client.call(verb, payload)
    except DaemonUnavailableError as exc:
        print(f"execd {args.command}: {exc.message}", file=sys.stderr)
        return EXIT_NO_DAEMON, None
    except ConfigError as exc:
        print(f"execd {args.command}: {exc}", file=sys.stderr)
        return 2, None
    except ControlError as exc:
        print(f"execd {args.command}: {exc.message} ({exc.code})", file=sys.stderr)
        return 1, None


def _speed(parser: argparse.ArgumentParser, choices: tuple[str, ...], default: str) -> None:
    group = parser.add_mutually_exclusive_group()
    for choice in choices:
        group.add_argument(f"-{choice}", f"--{choice}", dest="how", action="store_const",
                           const=choice)
    parser.set_defaults(how=default)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drain = subparsers.add_parser("drain", help="drain the node (like condor_drain)")
    _speed(drain, ("graceful", "quick", "fast"), "graceful")
    drain.add_argument("-reason", "--reason", default="", help="why (shown as DrainReason)")
    drain.add_argument("-check", "--check", metavar="EXPR",
                       help="drain only if this is true for every slot")
    drain.add_argument("-start", "--start", metavar="EXPR",
                       help="START while draining (graceful only): jobs it accepts may still run")
    drain.add_argument("-resume-on-completion", "--resume-on-completion", action="store_true",
                       help="accept jobs again once drained")
    drain.add_argument("-cancel", "--cancel", action="store_true", help="stop draining")
    drain.set_defaults(func=run_drain)

    vacate = subparsers.add_parser(
        "vacate", help="vacate jobs (like condor_vacate): each after its retirement time")
    vacate.add_argument("-fast", "--fast", action="store_true", help="hard-kill at once")
    vacate.add_argument("slot", nargs="?", help="only this slot (e.g. slot1_2)")
    vacate.set_defaults(func=run_vacate)

    reconfig = subparsers.add_parser("reconfig", help="reread the configuration (SIGHUP)")
    reconfig.set_defaults(func=lambda a: call(a, "reconfig", {})[0])

    off = subparsers.add_parser("off", help="shut execd down (like condor_off)")
    _speed(off, ("graceful", "peaceful", "fast"), "graceful")
    off.set_defaults(func=lambda a: call(a, "off", {"how": a.how})[0])

    who = subparsers.add_parser("who", help="running jobs: slot, job, user, starter pid")
    who.add_argument("-json", "--json", action="store_true")
    who.set_defaults(func=run_who)


def run_drain(args: argparse.Namespace) -> int:
    if args.cancel:
        return call(args, "cancel_drain", {})[0]
    payload: dict[str, Any] = {"how": args.how, "reason": args.reason,
                               "resume_on_completion": args.resume_on_completion}
    if args.check:
        payload["check"] = args.check
    if args.start:
        payload["start"] = args.start
    return call(args, "drain", payload)[0]


def run_vacate(args: argparse.Namespace) -> int:
    payload: dict[str, Any] = {"fast": args.fast}
    if args.slot:
        payload["slot"] = args.slot
    code, result = call(args, "vacate", payload)
    if code == 0:
        print(" ".join(result["vacated"]) or "no claimed slot")
    return code


def run_who(args: argparse.Namespace) -> int:
    code, result = call(args, "who", {})
    if code != 0:
        return code
    if args.json:
        print(json.dumps(result["jobs"], indent=1))
        return 0
    print(f"{'SLOT':10} {'JOB':20} {'OWNER':12} {'STARTER':>8} {'CPU_S':>8} {'MEM_MB':>8} "
          f"{'PROCS':>5} CGROUP")
    for job in result["jobs"]:
        cpu = job.get("cpu_user_s", 0.0) + job.get("cpu_sys_s", 0.0)
        print(f"{job['slot']:10} {job['job_id']:20} {job['owner']!s:12} {job['starter_pid']!s:>8} "
              f"{cpu:8.2f} {job.get('memory_mb', 0.0):8.1f} {job.get('processes', 0):5} "
              f"{job.get('cgroup', '-')}")
    return 0
