"""`make test`'s runner: the pool tier in one pytest, every other tier in another, both
at once; the pool tier itself on tiers.pool_workers() chroots at once (pytest-xdist,
one test file at a time per worker, one pool per chroot: tiers.pool_root()).

The pool tier spends most of its time waiting on HTCondor's timers (negotiation cycles,
retirement, leases) while the other tiers keep the CPU busy (QEMU above all), so running
them side by side cuts `make test` by more than half on a 2-core machine. The tiers
share nothing (each pool has its chroot and its own ports, the daemons of the other
tiers their own BASE_CGROUP and sockets).

The other tiers print to the terminal as usual; the pool tier's output goes to
.cache/test-logs/pool.log and is printed in full once both are done, then one line per
tier with its exit status. The exit status is the first non-zero one. With
EXECD_TEST_SERIAL=1 every tier runs in one pytest, one after the other;
EXECD_POOL_WORKERS=1 keeps the pool tier on one chroot.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tiers  # (beside this file)

REPO = Path(__file__).resolve().parent.parent
LOGS = REPO / ".cache" / "test-logs"
PYTEST = [sys.executable, "-m", "pytest", "--durations=30"]


def main() -> int:
    if os.environ.get("EXECD_TEST_SERIAL") == "1":
        return subprocess.run([*PYTEST, "tests"], cwd=REPO, check=False).returncode
    LOGS.mkdir(parents=True, exist_ok=True)
    pool_log = LOGS / "pool.log"
    with pool_log.open("wb") as out:
        workers = tiers.pool_workers()
        spread = ["-n", str(workers), "--dist", "loadfile"] if workers > 1 else []
        pool = subprocess.Popen([*PYTEST, *spread, "tests/pool"], cwd=REPO, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
        print(f"the pool tier runs alongside, on {workers} chroot(s), its output in "
              f"{pool_log}", flush=True)
        try:
            others = subprocess.run([*PYTEST, "--ignore=tests/pool", "tests"], cwd=REPO,
                                    check=False).returncode  # fmt: skip
        finally:
            pooled = pool.wait()
    sys.stdout.write(f"\n{'=' * 30} the pool tier ({pool_log}) {'=' * 30}\n")
    sys.stdout.write(pool_log.read_text(errors="replace"))
    print(f"\nother tiers: exit {others}\npool tier: exit {pooled}", flush=True)
    return others or pooled


if __name__ == "__main__":
    sys.exit(main())
