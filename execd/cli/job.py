"""`execd job -- CMD ARGS`: run one job on the local daemon and exit with its status.

It claims a slot (carving a dynamic slot from a partitionable one), activates the claim
with a job ad built from the options, streams the job's output while it runs, releases
the claim, and exits with the job's exit code, or 128+signal. A held job exits 125 and
an evicted one 124, each with a message on stderr.

If execd goes away while the job runs (a restart in place, a crash and a restart by its
supervisor), the job keeps running and this command waits for the new daemon, which
re-adopts the job, and then takes the job's outcome from it.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from execd.cli.common import control_socket
from execd.daemon.client import ControlClient, DaemonUnavailableError, wait_for_daemon
from execd.daemon.control import ControlError
from execd.errors import ConfigError
from execd.starter.sandbox import remove_tree

EXIT_HELD = 125
EXIT_EVICTED = 124
EXIT_REFUSED = 123
RECONNECT_SECONDS = 120.0  # how long to wait for a restarting execd


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "job",
        help="run one job on this node and exit with its exit code",
        description="Run CMD ARGS as a job on the local execd. Exit status: the job's, "
        f"128+N if a signal N ended it, {EXIT_HELD} if it was held, {EXIT_EVICTED} if it "
        f"was evicted, {EXIT_REFUSED} if no slot would take it.",
    )
    parser.add_argument("--cpus", type=float, default=1, help="RequestCpus (default 1)")
    parser.add_argument("--memory", type=int, default=128, help="RequestMemory in MB")
    parser.add_argument("--disk", type=int, default=1024, help="RequestDisk in KB")
    parser.add_argument("--gpus", type=int, default=0, help="RequestGPUs")
    parser.add_argument("--attr", action="append", default=[], metavar="K=V",
                        help="extra job ad attribute (a ClassAd value), repeatable")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ARGS")
    parser.set_defaults(func=run)


def job_ad(args: argparse.Namespace, iwd: Path) -> dict[str, Any]:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise ValueError("name a command after --")
    executable = shutil.which(command[0]) or command[0]
    ad: dict[str, Any] = {
        "Cmd": executable,
        "Args": command[1:],
        "RequestCpus": args.cpus,
        "RequestMemory": args.memory,
        "RequestDisk": args.disk,
        "Iwd": str(iwd),
        "Out": str(iwd / "stdout"),
        "Err": str(iwd / "stderr"),
        "JobUniverse": 5,
    }
    if args.gpus:
        ad["RequestGPUs"] = args.gpus
    for item in args.attr:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--attr {item!r} is not K=V")
        ad[key.strip()] = _value(value.strip())
    return ad


def _value(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text.strip('"')


class _Follower(threading.Thread):
    """Copies what the job writes to a file onto our own stream, as it is written."""

    def __init__(self, path: Path, out: Any) -> None:
        super().__init__(daemon=True)
        self.path, self.out = path, out
        self.stop = threading.Event()

    def run(self) -> None:
        offset = 0
        while True:
            finished = self.stop.is_set()
            if self.path.exists():
                with self.path.open("rb") as f:
                    f.seek(offset)
                    data = f.read()
                offset += len(data)
                if data:
                    self.out.buffer.write(data)
                    self.out.flush()
            if finished:
                return
            self.stop.wait(0.1)


def run(args: argparse.Namespace) -> int:
    try:
        socket_path = control_socket(args)
    except ConfigError as exc:
        print(f"execd job: {exc}", file=sys.stderr)
        return 2
    iwd = Path(tempfile.mkdtemp(prefix="execd-job-"))
    iwd.chmod(0o1777)  # the job may run as another user (SLOT<N>_USER or nobody)
    followers = [_Follower(iwd / "stdout", sys.stdout), _Follower(iwd / "stderr", sys.stderr)]
    try:
        ad = job_ad(args, iwd)
        with ControlClient(socket_path, timeout=None) as client:
            claim = client.call("request_claim", {"job": ad})
            try:
                started = client.call("activate", {"claim_id": claim["claim_id"], "job": ad})
                for follower in followers:
                    follower.start()
                outcome = await_outcome(client, socket_path, started["job_id"])
            finally:
                # the claim may already be gone (evicted, d-slot deleted, execd stopping)
                with contextlib.suppress(ControlError, OSError):
                    client.call("release", {"claim_id": claim["claim_id"]})
    except ValueError as exc:
        print(f"execd job: {exc}", file=sys.stderr)
        return 2
    except DaemonUnavailableError as exc:
        print(f"execd job: {exc.message}; start it with `execd run`", file=sys.stderr)
        return EXIT_REFUSED
    except ControlError as exc:
        print(f"execd job: {exc.message}", file=sys.stderr)
        return EXIT_REFUSED
    except OSError as exc:
        print(f"execd job: lost the connection to execd ({exc}); the job's outcome is unknown",
              file=sys.stderr)
        return EXIT_EVICTED
    finally:
        for follower in followers:
            follower.stop.set()
            if follower.is_alive():
                follower.join()
        remove_tree(iwd)
    return exit_status(outcome)


def await_outcome(client: ControlClient, socket_path: Path, job_id: str) -> dict[str, Any]:
    """The job's outcome, waiting through a restart of the daemon."""
    while True:
        try:
            outcome: dict[str, Any] = client.call("job_result", {"job_id": job_id, "wait": True})
            return outcome
        except ControlError as exc:
            if exc.code != "closed":
                raise
        except OSError:
            pass
        print("execd job: execd went away; waiting for it to come back (the job runs on)",
              file=sys.stderr)
        client.close()
        wait_for_daemon(socket_path, RECONNECT_SECONDS)
        client.connect()


def exit_status(outcome: dict[str, Any]) -> int:
    report = outcome.get("report") or {}
    hold = outcome.get("hold_reason") or report.get("HoldReason")
    if hold:
        code = report.get("HoldReasonCode", "")
        sub = report.get("HoldReasonSubCode", "")
        print(f"execd job: held (code {code}, subcode {sub}): {hold}", file=sys.stderr)
        return EXIT_HELD
    reason = report.get("ExitReason")
    if report.get("ExitBySignal"):
        if reason not in (None, "exited", "signaled"):
            print(f"execd job: evicted ({reason})", file=sys.stderr)
            return EXIT_EVICTED
        return 128 + int(report.get("ExitSignal", 0))
    if "ExitCode" in report:
        return int(report["ExitCode"])
    print(f"execd job: ended without an exit code ({reason})", file=sys.stderr)
    return EXIT_EVICTED

