"""A real `execd run` joined to the guest's pool, as tests/pool/test_pool_daemon.py
starts one on the host, with the guest's patience: under software emulation each
Python start-up costs tens of seconds."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from guest_pool import harness

from tests.component.daemon_harness import RunningDaemon, public_dir

START_S = 300


class GuestNode(RunningDaemon):
    """RunningDaemon with waits long enough for the guest (its start() waits too)."""

    joined: dict[str, Any]

    def wait_for(self, event: str, timeout: float = START_S, **match: Any) -> dict[str, Any]:
        return super().wait_for(event, timeout, **match)


def pool_knob(pool: harness.Pool, name: str) -> str:
    return pool.tool("condor_config_val", name).check().stdout.strip()


@contextlib.contextmanager
def running_node(pool: harness.Pool) -> Iterator[GuestNode]:
    """execd joined to the pool, sharing its domains (one host, one passwd)."""
    domains = "".join(f"{knob} = {pool_knob(pool, knob)}\n"
                      for knob in ("UID_DOMAIN", "FILESYSTEM_DOMAIN"))  # fmt: skip
    with public_dir("execd-vm-node-") as root:
        node = GuestNode(root, f"COLLECTOR_HOST = {pool.collector}\nUPDATE_INTERVAL = 2\n"
                               f"{domains}NUM_CPUS = 1\nMEMORY = 1024\n"
                               "EXECD_COMMAND_ADDRESS = 127.0.0.1:0\n")  # fmt: skip
        node.start()
        try:
            node.joined = node.wait_for("pool_joined", timeout=START_S)
            yield node
        finally:
            node.stop(signal.SIGQUIT, timeout=START_S)
