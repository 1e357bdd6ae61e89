"""A Daemon built in this process as `execd run` builds it, without its cgroup tree (no
job runs): for tests of its parts that need no starter. Build it under a running loop."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path

from execd.daemon.backfill import BackfillClient
from execd.daemon.broken import record_broken
from execd.daemon.fetch_work import FetchWorker
from execd.daemon.jobs import JobManager
from execd.daemon.node import Node, Paths
from execd.daemon.policy_glue import now, policy_config, slot_facts
from execd.daemon.runtime import Daemon
from execd.policy.engine import PolicyEngine


def daemon_without_cgroups(tmp_path: Path, extra_config: str = "", *,
                           restarting: bool = False) -> Daemon:
    """`restarting`: as `execd run` over an existing state, which recovers (recover())
    before its first policy pass: no pass is made here (one would forget a stored drain)."""
    config = tmp_path / "execd_config"
    config.write_text(f"LOCAL_DIR = {tmp_path}/state\nEXECD_LOG = {tmp_path}/log\n"
                      "NUM_CPUS = 4\nMEMORY = 1024\nuse FEATURE : PartitionableSlot\n"
                      + extra_config)
    daemon = Daemon(config)
    daemon.config, daemon.settings = daemon._read_config()
    daemon.paths = Paths.from_settings(daemon.settings)
    daemon.paths.create()
    daemon.node = Node.build(daemon.config, daemon.settings)
    daemon.engine = PolicyEngine(policy_config(daemon.settings))
    daemon.fetch = FetchWorker(daemon)  # not run: the slot ads' fetch-work times
    daemon.backfill = BackfillClient(None, lambda: None)
    daemon.jobs = JobManager(daemon)
    daemon.node.on_broken = functools.partial(record_broken, daemon.jobs)  # as start() does
    moment = now()
    for ad in daemon.node.ads():
        daemon.execute(daemon.engine.add_slot(str(ad["Name"]).split("@")[0], slot_facts(ad),
                                              moment))
    if not restarting:
        daemon.evaluate()  # Owner -> Unclaimed
    return daemon


@contextlib.contextmanager
def open_daemon(tmp_path: Path, extra_config: str = "", *,
                restarting: bool = False) -> Iterator[Daemon]:  # fmt: skip
    """daemon_without_cgroups, its state store closed when the block ends."""
    daemon = daemon_without_cgroups(tmp_path, extra_config, restarting=restarting)
    try:
        yield daemon
    finally:
        daemon.jobs.store.close()
