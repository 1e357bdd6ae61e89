"""The pidfile refuses a second daemon, even from another process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from execd.daemon.pidfile import AlreadyRunningError, PidFile

HOLD = """
import sys, time
from pathlib import Path
from execd.daemon.pidfile import PidFile
with PidFile(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.read()
"""


def test_second_process_is_refused_and_named(tmp_path: Path) -> None:
    path = tmp_path / "run" / "execd.pid"
    with subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        assert path.read_text().strip() == str(holder.pid)
        with pytest.raises(AlreadyRunningError, match=f"pid {holder.pid}"):
            PidFile(path).acquire()
        holder.stdin.close()
        holder.wait(timeout=10)
    assert not path.exists()
    with PidFile(path):
        assert path.exists()
