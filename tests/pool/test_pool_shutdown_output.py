"""A graceful shutdown under an `ON_EXIT_OR_EVICT` job (condor_off -startd: condor_master's
SIGTERM to condor_startd; SIGTERM to execd) waits until the job's shadow has its sandbox
and its end: the evicted job's 64 MiB file reaches the schedd's spool and the user log
says 004 (Startd was shutdown), on `execd run` as on the pool's own condor_startd, which
waits for its starters. execd's daemon stopped about a second after its last starter
exited and cut the conversations still sending the sandbox and job_exit: the shadow,
left waiting for a reconnect, logged nothing (the graceful shutdown case of
test_pool_vacate_reasons.py failed so on a loaded CI host). Here the shadow is stopped
(SIGSTOP) until execd says it waits for it, so a daemon that does not wait loses the
job's end every time.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

import pool_harness as harness
from test_pool_daemon import WAIT_S
from test_pool_jobs import pool_node, timeless
from test_pool_preemption import evicted_lines, slot_ad
from test_pool_spool_on_evict import submit_marked

SIZE = 64 * 1024 * 1024
SCRIPT = f"""#!/bin/sh
head -c {SIZE} /dev/zero > big.bin
touch "/tmp/execd-shutdown-output-$1"
exec sleep 300
"""


def shadows(pool: harness.Pool) -> list[int]:
    """The pids of the pool's condor_shadow processes (those rooted in its chroot)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "condor_shadow" \
                    and os.path.realpath(proc / "root") == str(pool.root):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            continue
    return pids


def spooled(pool: harness.Pool, cluster: int) -> int:
    """The size of the job's big.bin in the schedd's spool (-1: not there)."""
    sandbox = pool.host_path(f"{harness.LOCAL_DIR}/spool/{cluster % 10000}/0/"
                             f"cluster{cluster}.proc0.subproc0")  # fmt: skip
    path = sandbox / "big.bin"
    return path.stat().st_size if path.exists() else -1


def shut_down_under_a_job(pool: harness.Pool, stop: Callable[[], None],
                          ) -> tuple[list[str], list[str], int]:  # fmt: skip
    """(the job's events, its 004's lines, its spooled big.bin's size) after `stop`
    shut the pool's only execute point down while the job ran."""
    job, mark = submit_marked(pool, SCRIPT, "/tmp/execd-shutdown-output-{token}")
    try:
        job.wait_for_event("001", WAIT_S)
        harness.wait_for("the job's file written", mark.exists, WAIT_S, 0.1)
        stop()
        lines = evicted_lines(job.wait_for_event("004", WAIT_S))
        return timeless(job.events()), lines, spooled(pool, job.cluster)
    finally:
        mark.unlink(missing_ok=True)
        pool.tool("condor_rm", str(job.cluster), user=harness.SUBMITTER)


def test_a_graceful_shutdown_lets_the_shadow_have_the_evicted_sandbox(
        running_pool: harness.RunningPool) -> None:  # fmt: skip
    pool = running_pool.get(with_startd=False)
    with tempfile.TemporaryDirectory(prefix="execd-pool-") as tmp:
        node = pool_node(pool, tmp)
        try:
            assert node.proc is not None
            proc = node.proc

            def stop() -> None:
                stopped = shadows(pool)
                assert stopped
                for pid in stopped:
                    os.kill(pid, signal.SIGSTOP)
                try:
                    proc.send_signal(signal.SIGTERM)
                    node.wait_for("shutdown_waits_for_shadows", WAIT_S)
                finally:
                    for pid in stopped:
                        os.kill(pid, signal.SIGCONT)

            ours = shut_down_under_a_job(pool, stop)
            assert proc.wait(WAIT_S) == 0
        finally:
            node.stop()
    reference = running_pool.get(with_startd=True)
    try:
        theirs = shut_down_under_a_job(
            reference, lambda: reference.tool("condor_off", "-startd").check())
    finally:
        reference.tool("condor_on", "-startd").check()
        slot_ad(reference, lambda ad: ad.get("State") == "Unclaimed")
    assert ours == theirs
    assert ours[1] == ["Job was evicted. Code 1013 Subcode 0", "Reason: Startd was shutdown"]
    assert ours[2] == SIZE
