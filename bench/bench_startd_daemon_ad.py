"""The cost of the startd daemon ad (pool mode, execd/daemon/startd_daemon_ad.py): one
build per advertising round that sends it (every UPDATE_INTERVAL), over the round's
slot ads (TotalInUse<Res> sums the dynamic slots').

Reports: milliseconds per build with a p-slot and 1,000 claimed dynamic slots, and with
a p-slot alone; and the cost of the HasStartDaemonAd check every slot ad pays.

Run: .venv/bin/python bench/bench_startd_daemon_ad.py
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from bench_daemon_attrs import attributes

from execd.config.loader import load_config
from execd.daemon.node import Node
from execd.daemon.startd_daemon_ad import StartdDaemonAd
from execd.wire.classad_codec import WireAd, from_values

DSLOTS = 1000
ROUNDS = 200


def slot(name: str, dynamic: bool) -> WireAd:
    values: dict[str, object] = {
        "Name": f"{name}@node.example", "Machine": "node.example", "State": "Claimed",
        "Cpus": 1, "Memory": 128, "Disk": 1024, "GPUs": 0,
        "MachineResources": "Cpus Memory Disk Swap GPUs",
        "MyAddress": "<127.0.0.1:9618?addrs=127.0.0.1-9618&alias=node.example&noUDP>",
        "DynamicSlot" if dynamic else "PartitionableSlot": True,
    }  # fmt: skip
    return from_values(values)


def builder(tmp: Path) -> StartdDaemonAd:
    daemon_attrs, daemon = attributes(tmp)
    config = load_config(tmp / "execd.conf")
    daemon.node = Node.build(config, daemon.settings)
    daemon.reconfigured = 0.0
    member = SimpleNamespace(daemon=daemon, daemon_attrs=daemon_attrs,
                             collector=SimpleNamespace(version=""),
                             config=SimpleNamespace(interval_s=300.0))  # fmt: skip
    return StartdDaemonAd(member)  # type: ignore[arg-type]


def per_build(ad: StartdDaemonAd, dslots: int) -> float:
    pairs = [(slot("slot1", False), {})]
    pairs += [(slot(f"slot1_{i}", True), {}) for i in range(1, dslots + 1)]
    ad.build(pairs)  # warm up
    t0 = time.perf_counter()
    for _ in range(ROUNDS):
        ad.build(pairs)
    return (time.perf_counter() - t0) / ROUNDS


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ad = builder(Path(tmp))
        busy, idle = per_build(ad, DSLOTS), per_build(ad, 0)
        t0 = time.perf_counter()
        for _ in range(ROUNDS * 100):
            ad.slot_attributes()
        check = (time.perf_counter() - t0) / (ROUNDS * 100)
    print(f"daemon ad build: {busy * 1e3:.2f} ms with {DSLOTS} dynamic slots, "
          f"{idle * 1e3:.2f} ms with a p-slot alone (once per UPDATE_INTERVAL)")
    print(f"HasStartDaemonAd per slot ad: {check * 1e6:.2f} us")


if __name__ == "__main__":
    main()
