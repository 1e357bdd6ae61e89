"""The peek's blocking worker: results and errors reach the caller, a hung call times
out without holding the loop, and the daemon still exits while the call hangs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import pytest

from execd.wire.blocking_worker import BlockingWorker

HUNG_AT_EXIT = """
import asyncio, threading
from execd.wire.blocking_worker import BlockingWorker
async def main():
    try:
        await BlockingWorker("hung").run(0.1, threading.Event().wait)
    except TimeoutError:
        print("timed out", flush=True)
asyncio.run(main())
"""


def test_results_errors_and_a_hung_call() -> None:
    worker = BlockingWorker("test")
    release = threading.Event()

    async def run() -> list[object]:
        seen: list[object] = [await worker.run(5, sum, [1, 2, 3])]
        with pytest.raises(ZeroDivisionError):
            await worker.run(5, divmod, 1, 0)
        with pytest.raises(TimeoutError):
            await worker.run(0.2, release.wait, 30)
        queued = asyncio.ensure_future(worker.run(5, len, "abc"))  # behind the hung call
        release.set()
        seen.append(await queued)
        return seen

    assert asyncio.run(run()) == [6, 3]


def test_a_call_hung_in_the_kernel_does_not_hold_the_daemons_exit() -> None:
    done = subprocess.run([sys.executable, "-c", HUNG_AT_EXIT], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "timed out\n")
