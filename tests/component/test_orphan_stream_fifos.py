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


def test_a_directory_named_like_a_streams_fifo_is_left_and_recovery_goes_on(
        tmp_path: Path) -> None:  # fmt: skip
    """In an EXECUTE of mode 1777 a job's user can make a directory (or a file) named
    `dir_N.stdout`: recovery logs it and leaves it, the FIFOs beside it still go, and
    the daemon's start (remove_orphans, from recover) does not fail."""
    async def scenario() -> None:
        with open_daemon(tmp_path, restarting=True) as daemon:
            execute = daemon.paths.execute
            (execute / "dir_999997.stdout").mkdir()
            (execute / "dir_999997.stdout" / "inside").write_text("the user's\n")
            (execute / "dir_999996.stderr").write_text("a user's file\n")
            os.mkfifo(execute / "dir_999995.stdout")
            assert remove_orphans(daemon.jobs) == 1
            assert sorted(os.listdir(execute)) == ["dir_999996.stderr", "dir_999997.stdout"]
            assert (execute / "dir_999997.stdout" / "inside").read_text() == "the user's\n"

    asyncio.run(scenario())
