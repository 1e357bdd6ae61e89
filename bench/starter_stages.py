"""The starter zygote of bench/bench_starter_floor.py: execd/starter/zygote.py's loop, whose
starters stop themselves (SIGSTOP) at a stage of their job, to be measured there.

It imports what the real zygote imports and nothing more (no argparse, no statistics:
random's at-fork reseed alone would be a cost the real one does not have).
Requests on stdin: `STAGE NUL SPEC_PATH NUL LOG_PATH NL`; answers `PID NL`.
Arguments: spec paths of warm-up jobs to run whole in this process first.
"""

from __future__ import annotations

import gc
import os
import signal
import sys

from execd.starter import zygote as z
from execd.starter.program import Prepared, prepare, run
from execd.starter.run import CONTROL, Starter


def stop_at(stage: str) -> None:
    """Patch the starter (in the forked child only) to stop itself at STAGE."""
    start, measure, polls = Starter.start, Starter.measure, [0]

    def started(self: Starter) -> None:
        start(self)
        if stage == "start":
            os.kill(os.getpid(), signal.SIGSTOP)

    def measured(self: Starter) -> None:
        measure(self)
        polls[0] += 1
        if stage == f"poll{polls[0]}":
            os.kill(os.getpid(), signal.SIGSTOP)

    Starter.start, Starter.measure = started, measured  # type: ignore[method-assign]


def child(stage: str, prepared: Prepared, log: str) -> int:
    if stage == "fork":
        os.kill(os.getpid(), signal.SIGSTOP)
        return 0
    stop_at(stage)
    return z._become_starter(prepared, log)


def main(warm: list[str]) -> int:
    signal.pthread_sigmask(signal.SIG_BLOCK, CONTROL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    import ctypes  # noqa: F401, PLC0415 - as the real zygote: loaded once, before the forks
    import shutil  # noqa: F401, PLC0415

    for path in warm:  # whole jobs in this process: their code is warm here afterwards
        run(prepare(path))
    gc.collect()
    gc.freeze()
    while line := sys.stdin.buffer.readline():
        stage, spec_path, log = line[:-1].decode().split("\0")
        z._reap_finished()
        prepared = prepare(spec_path)
        pid = os.fork()
        if pid == 0:
            os._exit(child(stage, prepared, log))
        del prepared
        os.write(1, f"{pid}\n".encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
