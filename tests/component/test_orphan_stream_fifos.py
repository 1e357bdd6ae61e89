"""Recovery after a crash (execd.daemon.recovery.remove_orphans) removes a streamed
job's FIFOs next to its sandbox (`dir_N.stdout`, `dir_N.stderr`, stream_output), as
it removes the sandbox: a daemon that crashed left them there."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from in_process_daemon import open_daemon

from execd.daemon.recovery import remove_orphans


def test_a_crashed_streams_fifos_are_removed_with_its_sandbox(tmp_path: Path) -> None:
    async def scenario() -> None:
        with open_daemon(tmp_path, restarting=True) as daemon:
            execute = daemon.paths.execute
            (execute / "dir_999999").mkdir()
            os.mkfifo(execute / "dir_999999.stdout")
            os.mkfifo(execute / "dir_999998.stderr")  # its sandbox already gone
            (execute / "dir_999999.notes").write_text("not ours to judge\n")
            assert remove_orphans(daemon.jobs) == 3
            assert sorted(os.listdir(execute)) == ["dir_999999.notes"]

    asyncio.run(scenario())
