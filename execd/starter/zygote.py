"""The starter zygote: one process that has started Python and imported the starter,
and forks a starter per job (execd/starter/launcher.py, StarterZygote, is its client).

Why: a cold starter spends most of its launch starting Python and importing (~40 ms of
~50 here) and keeps ~3 MB of private pages for its modules. A starter forked from the
zygote starts at once, and its modules stay pages shared with the zygote and its
siblings (gc.freeze keeps the collector from touching, and so copying, them).
A page stays shared only while neither side writes to it: what a starter costs is the
pages it writes and the pages the zygote writes between two forks (bench/README.md).

Protocol on stdin/stdout: the daemon writes `SPEC_PATH NUL LOG_PATH NL`; the zygote reads
the spec and plans the job (execd.starter.program.prepare: no side effect yet), forks, the
starter leads a new session and runs the job as `python -m execd.starter SPEC_PATH` would,
and the zygote answers `PID NL`. The zygote reaps finished starters only when the next
request comes, so a starter's pid cannot be reused before the daemon has opened a pidfd
on it. EOF (the daemon gone) ends the zygote; running starters carry on.
"""

from __future__ import annotations

import gc
import os
import signal
import sys

from execd.starter.program import Prepared, prepare, run
from execd.starter.run import CONTROL


def _reap_finished() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _become_starter(prepared: Prepared, log_path: str) -> int:
    os.setsid()  # its own session, as a cold starter: it outlives the daemon
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    return run(prepared)


def zygote_main() -> int:
    # Blocked here so that a starter is never without them, even before main() runs.
    signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    import ctypes  # noqa: F401, PLC0415 - the job's child needs it (no_new_privs): load it once
    import shutil  # noqa: F401, PLC0415 - the starter's cleanup needs it: load it once

    gc.collect()
    gc.freeze()
    requests = sys.stdin.buffer
    while True:
        line = requests.readline()
        if not line.endswith(b"\n") or b"\0" not in line:
            return 0  # EOF: the daemon went away
        _reap_finished()
        spec_path, log_path = line[:-1].decode().split("\0", 1)
        # Read and planned here, not in the starter: what this makes, the starter
        # inherits in pages shared with the zygote (what it writes is its own memory).
        prepared = prepare(spec_path)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _become_starter(prepared, log_path)
            finally:
                os._exit(code)
        del prepared
        os.write(1, f"{pid}\n".encode())
