"""`execd run` processes beside the real pool, and the guarantee that none outlives its test.

start_node() records every execd it starts; the pool tier's autouse fixture
(conftest.py `no_execd_left`) stops whatever a test left running and waits until the
collector lists no execute point, invalidating stale ads if an execd died without doing
so. A failing pool test therefore stays local: the next test starts with an empty pool.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pool_harness as harness

from tests.component.daemon_harness import RunningDaemon

WAIT_S = 60
GONE_S = 30  # an execd's ads leave the collector when it stops, or are invalidated
# A stopped execd has invalidated its ads before it exits: what is still listed after
# this grace is stale (a killed execd's) and is invalidated.
GRACE_S = 5

# A job that holds a claim while it runs. With file transfer: its Iwd (the submitter's
# home in the chroot) does not exist on the host, where execd runs jobs (without
# transfer execd holds it at once: Cannot access initial working directory).
SLEEP_JOB = """\
executable = /bin/sleep
arguments = 300
transfer_executable = false
should_transfer_files = YES
when_to_transfer_output = ON_EXIT
log = job.log
request_cpus = 1
request_memory = 64
queue
"""

# The execds started by the running test (drained by the autouse fixture).
STARTED: list[PoolNode] = []
# Where the running test's next execd writes its log (pool_logs.TestLogs.execd_log, set
# by conftest.py); None: in its root.
LOG_PLACE: Callable[[], Path] | None = None


class PoolNode(RunningDaemon):
    """An execd in pool mode, with helpers to compare its view with the pool's."""

    joined: dict[str, Any]

    def slots(self) -> dict[str, dict[str, Any]]:
        done = self.execd("status", "-json")
        assert done.returncode == 0, done.stderr
        return {ad["Name"]: ad for ad in json.loads(done.stdout)}

    def address(self) -> str:
        return str(self.joined["address"])

    def port(self) -> int:
        return int(self.address().split(":")[1].split("?")[0].rstrip(">"))

    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and self.proc.poll() is None


def pool_knob(pool: harness.Pool, name: str) -> str:
    return pool.tool("condor_config_val", name).check().stdout.strip()


def start_node(pool: harness.Pool, root: Path, extra: str = "") -> PoolNode:
    """execd joined to the pool; it shares the pool's domains (one host, one passwd)."""
    root.chmod(0o755)
    domains = "".join(f"{knob} = {pool_knob(pool, knob)}\n"
                      for knob in ("UID_DOMAIN", "FILESYSTEM_DOMAIN"))  # fmt: skip
    node = PoolNode(root, f"COLLECTOR_HOST = {pool.collector}\nUPDATE_INTERVAL = 2\n" + domains +
                          "NUM_CPUS = 2\nMEMORY = 1024\nEXECD_COMMAND_ADDRESS = 127.0.0.1:0\n"
                          + extra, log=LOG_PLACE() if LOG_PLACE else None)  # fmt: skip
    STARTED.append(node)
    node.start()
    node.joined = node.wait_for("pool_joined")
    return node


def pool_slots(pool: harness.Pool) -> dict[str, dict[str, Any]]:
    return {ad["Name"]: ad for ad in pool.status("-slots")}


def wait_pool(pool: harness.Pool, what: str, probe: Any) -> Any:
    return harness.wait_for(what, lambda: probe(pool_slots(pool)), WAIT_S, 0.2)


def stop_started_nodes() -> list[str]:
    """Stop every execd the test started and left running; what was left, for the report."""
    left = []
    while STARTED:
        node = STARTED.pop()
        if node.running():
            left.append(str(node.root))
            try:
                node.stop(signal.SIGQUIT, timeout=GONE_S)
            except (OSError, subprocess.SubprocessError):
                if node.proc is not None:
                    node.proc.kill()
    return left


def clear_execute_points(pool: harness.Pool) -> bool:
    """Wait until the collector lists no startd ad (slot or daemon ad); invalidate what
    stays (an execd that was killed never invalidates its ads). True when something had
    to be invalidated."""
    def gone() -> bool:
        return not pool.status("-slots") and not pool.status("-startd")

    try:
        harness.wait_for("execd's ads gone", gone, GRACE_S, 0.2)
        return False
    except harness.PoolError:
        pass
    query = pool.host_path("/tmp/execd-invalidate-all.ad")
    for target in ("Machine", "StartD"):  # the slot ads, then the daemon ad
        query.write_text(f'MyType = "Query"\nTargetType = "{target}"\nRequirements = true\n')
        try:
            pool.tool("condor_advertise", "INVALIDATE_STARTD_ADS",
                      "/tmp/execd-invalidate-all.ad").check()  # fmt: skip
        finally:
            query.unlink()
    harness.wait_for("stale ads invalidated", gone, GONE_S, 0.2)
    return True
