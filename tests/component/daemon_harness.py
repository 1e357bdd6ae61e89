"""Start a real `execd run` in a subprocess and follow its JSON log."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


class RunningDaemon:
    def __init__(self, root: Path, extra_config: str = "", log: Path | None = None) -> None:
        self.root = root
        self.base_cgroup = f"execd-test-{os.getpid()}-{secrets.token_hex(4)}"
        self.config = root / "execd_config"
        self.log = log or root / "ExecdLog"
        self.config.write_text(self.config_text(extra_config))
        self.proc: subprocess.Popen[str] | None = None
        self._offset = 0

    def config_text(self, extra: str) -> str:
        # A private BASE_CGROUP, so the daemon never touches a real execd's tree. No
        # benchmarks unless a test asks (RUNBENCHMARKS' default runs them once), as
        # `use ROLE : Personal` says for the pool tier's condor_startd.
        return (
            f"LOCAL_DIR = {self.root}/state\nEXECD_LOG = {self.log}\nUPDATE_INTERVAL = 300\n"
            f"BASE_CGROUP = {self.base_cgroup}\nRUNBENCHMARKS = 0\n"
            "use FEATURE : PartitionableSlot\n" + extra
        )

    def remove_cgroup(self) -> None:
        """Remove the daemon's cgroup tree once it has exited (no-op if none was made)."""
        from execd.cgroups.discovery import discover
        from execd.cgroups.fs import CgroupFS
        from execd.cgroups.tree import CgroupTree

        try:
            hierarchy = discover(CgroupFS())
        except Exception:  # no cgroup v2 here: the daemon made no tree either
            return
        if (hierarchy.mount / self.base_cgroup).exists():
            CgroupTree(CgroupFS(), hierarchy, self.base_cgroup).remove()

    @property
    def cgroup_base(self) -> Path:
        """The daemon's BASE_CGROUP directory on this host's cgroup v2 mount (at
        /sys/fs/cgroup on a pure v2 host, /sys/fs/cgroup/unified on a hybrid one)."""
        from execd.cgroups.discovery import discover
        from execd.cgroups.fs import CgroupFS

        return discover(CgroupFS()).mount / self.base_cgroup

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "CONDOR_CONFIG"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return env

    def execd(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "execd", "--config", str(self.config), *args],
            env=self.env(), capture_output=True, text=True, timeout=timeout, check=False,
        )

    def start(self) -> RunningDaemon:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "execd", "--config", str(self.config), "run"],
            env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.wait_for("execd_started")
        return self

    def send(self, signum: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    def events(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def wait_for(self, event: str, timeout: float = 30, **match: Any) -> dict[str, Any]:
        """The next log event named EVENT (after those already consumed) with MATCH fields."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            events = self.events()
            for index in range(self._offset, len(events)):
                found = events[index]
                if found.get("event") == event and all(found.get(k) == v for k, v in match.items()):
                    self._offset = index + 1
                    return found
            if self.proc is not None and self.proc.poll() is not None:
                _out, err = self.proc.communicate()
                raise AssertionError(f"execd exited {self.proc.returncode} before {event}: {err}")
            time.sleep(0.05)  # polling a file: there is no notification to await
        raise AssertionError(f"no {event} event within {timeout}s; log: {self.events()[-5:]}")

    def stop(self, signum: signal.Signals = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()
        self.remove_cgroup()
        return self.proc.returncode


@contextlib.contextmanager
def public_dir(prefix: str) -> Iterator[Path]:
    """A fresh directory others may enter: jobs and hooks run as `nobody`, and pytest's
    tmp_path lies inside a directory only root may enter."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        path = Path(tmp)
        path.chmod(0o755)
        yield path


@contextlib.contextmanager
def running_daemon(extra_config: str, prefix: str = "execd-node-") -> Iterator[RunningDaemon]:
    """A started daemon in its own public directory; stopped fast (SIGQUIT) afterwards."""
    with public_dir(prefix) as root:
        daemon = RunningDaemon(root, extra_config).start()
        try:
            yield daemon
        finally:
            daemon.stop(signal.SIGQUIT)


def write_script(directory: Path, name: str, body: str) -> Path:
    """An executable /bin/sh script (a hook, a job) in `directory`."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path
