"""A stand-in for `execd run` under systemd (Type=notify), for the systemd VM tests.

It speaks the notify protocol through execd's own Notifier the way the daemon must:
READY=1 after start-up, RELOADING=1 + MONOTONIC_USEC then READY=1 on SIGHUP (a config
that fails validation is rejected with a STATUS= line and the old one kept), STOPPING=1
on SIGTERM, WATCHDOG=1 pings at half of WATCHDOG_USEC. SIGUSR1 makes it "hang": it stops
pinging, so systemd's watchdog must kill and restart it.

Like the daemon it owns its unit's delegated cgroup subtree: it lives in the `daemon`
leaf (put there by DelegateSubgroup=daemon on systemd >= 254; on older systemd, which
ignores that setting, it moves itself there) and creates a job cgroup beside it with
the memory, cpu and pids controllers enabled, holding one long-running "job" process
that must outlive the daemon's stop (KillMode=process).

Every event is appended as one JSON line to EVENTS so the test can read what happened.
Usage: standin_service.py EVENTS CONFIG
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from execd.daemon.sdnotify import Notifier

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "cpu", "pids")
START_DELAY_S = 1.5  # start-up work before READY=1: `systemctl start` must wait it out


class Standin:
    def __init__(self, events: Path, config: Path) -> None:
        self.events = events
        self.config_path = config
        self.notify = Notifier()
        self.lock = threading.Lock()
        self.hung = threading.Event()
        self.stop = threading.Event()
        self.config = ""

    def record(self, event: str, **fields: object) -> None:
        line = {"event": event, "pid": os.getpid(), "mono": time.monotonic(), **fields}
        with self.lock, self.events.open("a") as out:
            out.write(json.dumps(line) + "\n")

    def load_config(self) -> str | None:
        """The new config text, or None when it fails validation (any line `bad`)."""
        text = self.config_path.read_text() if self.config_path.exists() else ""
        return None if "bad" in text.split() else text.strip()

    def own_cgroup(self) -> Path:
        line = Path("/proc/self/cgroup").read_text().strip().splitlines()[0]
        return CGROUP_ROOT / line.split("::", 1)[1].lstrip("/")

    def take_delegated_tree(self) -> None:
        started_in = self.own_cgroup()
        leaf = started_in
        if started_in.name != "daemon":
            leaf = started_in / "daemon"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
        unit = leaf.parent
        wanted = " ".join(f"+{c}" for c in CONTROLLERS)
        (unit / "cgroup.subtree_control").write_text(wanted)
        job = unit / f"job-{os.getpid()}"
        job.mkdir()
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        (job / "cgroup.procs").write_text(str(child.pid))
        self.record(
            "cgroups",
            started_in=str(started_in),
            daemon=str(self.own_cgroup()),
            job=str(job),
            job_pid=child.pid,
            job_controllers=(job / "cgroup.controllers").read_text().split(),
            job_procs=(job / "cgroup.procs").read_text().split(),
        )

    def on_sighup(self) -> None:
        self.notify.reloading()
        self.record("sighup")
        new = self.load_config()
        if new is None:
            self.notify.send(ready=1, status="reload rejected: bad config; old one kept")
            self.record("reload_rejected", config=self.config)
        else:
            self.config = new
            self.notify.send(ready=1, status=f"running with config {new!r}")
            self.record("reloaded", config=new)

    def watchdog_loop(self, interval: float) -> None:
        while not self.stop.wait(interval):
            if not self.hung.is_set():
                self.notify.watchdog()

    def run(self) -> int:
        # Blocked before any thread starts and taken synchronously: no signal is lost
        # between two waits, and handlers never run in the middle of a notify send.
        handled = {signal.SIGHUP, signal.SIGTERM, signal.SIGUSR1}
        signal.pthread_sigmask(signal.SIG_BLOCK, handled)
        self.record("started", argv=sys.argv, watchdog_usec=self.notify.watchdog_usec)
        self.config = self.load_config() or ""
        self.take_delegated_tree()
        interval = self.notify.watchdog_interval()
        if interval:
            threading.Thread(target=self.watchdog_loop, args=(interval,), daemon=True).start()
        time.sleep(START_DELAY_S)
        self.record("ready_sent")
        self.notify.ready(status=f"running with config {self.config!r}")
        while True:
            signum = signal.sigwaitinfo(handled).si_signo
            if signum == signal.SIGHUP:
                self.on_sighup()
            elif signum == signal.SIGUSR1:
                self.record("hanging")
                self.hung.set()
            else:
                self.notify.stopping(status="stopping")
                self.record("sigterm")
                self.stop.set()
                return 0


def main() -> int:
    events, config = Path(sys.argv[1]), Path(sys.argv[2])
    return Standin(events, config).run()


if __name__ == "__main__":
    sys.exit(main())
