"""A failing pool test's logs, kept where the failure report says.

The pool runs for the whole session and its daemons' logs (LOCAL_DIR/log in the chroot)
are wiped whenever a pool starts; an execd's log lives in its test's temporary root.
So each test gets a directory of its own, `<root>/<test name>/`:

- `execd-<n>/ExecdLog`: the log of each execd the test starts (pool_node.start_node
  writes it there instead of its root);
- `condor-<n>/`: the part the test wrote of each HTCondor daemon's log (MasterLog,
  CollectorLog, NegotiatorLog, SchedLog, ShadowLog, StartLog, StarterLog.*, ...), copied
  when a pool's logs are about to be wiped (the test switched pools) and at its end.

When the test passes the directory is removed; when it fails it stays, and the report's
"pool logs" section names it. The root is $EXECD_POOL_LOGS, else `pool-logs` under
pytest's base temporary directory (pytest keeps the last three runs' and removes older).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pool_harness as harness

ROOT_ENV = "EXECD_POOL_LOGS"
NAME_MAX = 100


def test_dir_name(nodeid: str) -> str:
    """A directory name for a test id (tests/pool/test_x.py::test_y[a] -> test_x-test_y-a)."""
    tail = nodeid.rsplit("/", 1)[-1].replace(".py::", "-")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", tail).strip("-")[:NAME_MAX]


def log_files(pool: harness.Pool) -> list[Path]:
    """The pool daemons' logs (and condor_master's stdout); not the hidden address files."""
    log_dir = pool.local_dir / "log"
    if not log_dir.is_dir():
        return []
    found = sorted(p for p in log_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    stdout = pool.local_dir / "master.stdout"
    return found + ([stdout] if stdout.is_file() else [])


def log_sizes(pool: harness.Pool | None) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in log_files(pool)} if pool is not None else {}


class TestLogs:
    """One test's kept logs (see the module's docstring)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, directory: Path, running: harness.RunningPool) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self._running = running
        # where each log of the pool running as the test starts stood then
        self._pool = running.current
        self._offsets = log_sizes(running.current)
        self._copies = 0
        self._execds = 0

    def execd_log(self) -> Path:
        """Where the test's next execd writes its log."""
        self._execds += 1
        place = self.dir / f"execd-{self._execds}"
        place.mkdir()
        return place / "ExecdLog"

    def keep_pool_logs(self, pool: harness.Pool) -> None:
        """Copy what the test wrote of `pool`'s logs (all of them, for a pool started
        during the test) into the next condor-<n>/."""
        self._copies += 1
        target = self.dir / f"condor-{self._copies}"
        target.mkdir()
        offsets = self._offsets if pool is self._pool else {}
        for path in log_files(pool):
            start = offsets.get(path.name, 0)
            with path.open("rb") as source, (target / path.name).open("wb") as copy:
                if start <= path.stat().st_size:  # else rotated meanwhile: all of it
                    source.seek(start)
                shutil.copyfileobj(source, copy)
        (target / "POOL").write_text(f"{pool.root}{'' if pool.master else ' (stopped)'}\n"
                                     f"from byte offsets: {offsets or 'the start'}\n")  # fmt: skip

    def finish(self, failed: bool) -> None:
        """At the test's end: keep everything if it failed, else remove the directory."""
        if failed:
            if self._running.last is not None:
                self.keep_pool_logs(self._running.last)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
