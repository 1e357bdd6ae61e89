"""What the daemon holds for its starters and threads (bench/bench_pool.py measures it):
the starter zygote is up from the start, and threads share one malloc arena."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

from execd.daemon.footprint import small_default_executor
from tests.component.daemon_harness import REPO, running_daemon


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of a process's children."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append((int(entry.name), cmdline))
    return found


def test_the_starter_zygote_is_up_before_the_first_job_and_forks_its_starter() -> None:
    with running_daemon("NUM_CPUS = 1\nMEMORY = 512\n") as node:
        assert node.proc is not None
        zygotes = [p for p, cmd in _children(node.proc.pid) if "--zygote" in cmd]
        assert len(zygotes) == 1, _children(node.proc.pid)  # served: up, no job yet
        # The job's parent is its starter; the starter's parent, the zygote.
        done = node.execd("job", "--", "sh", "-c", "grep PPid /proc/$PPID/status", timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["PPid:", str(zygotes[0])]


ARENAS = """
import ctypes, sys, threading
from execd.daemon.footprint import limit_malloc_arenas
if sys.argv[1] == "limited":
    assert limit_malloc_arenas()
libc = ctypes.CDLL(None)
both = threading.Barrier(4)
def allocate():
    both.wait()  # all at once: each would get its own arena
    [ctypes.create_string_buffer(1000) for _ in range(100)]
threads = [threading.Thread(target=allocate) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
libc.open_memstream.restype = ctypes.c_void_p
buf, size = ctypes.c_char_p(), ctypes.c_size_t()
stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
libc.malloc_info(0, stream)
libc.fclose(stream)
print(buf.value.decode().count("<heap nr="))
"""


def test_threads_share_one_malloc_arena_once_limited() -> None:
    def arenas(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True,
                             text=True, cwd=REPO, timeout=60, check=True)  # fmt: skip
        return int(out.stdout)

    assert arenas("limited") == 1
    assert arenas("default") > 1  # glibc: a new arena for a thread that finds them busy


def test_blocking_work_runs_on_two_threads_at_most() -> None:
    gate = threading.Event()

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        small_default_executor(loop)
        waits = [loop.run_in_executor(None, gate.wait, 30) for _ in range(8)]
        # every call blocks: the executor has started all the threads it ever will
        workers = [t.name for t in threading.enumerate() if t.name.startswith("execd-io")]
        gate.set()
        await asyncio.gather(*waits)
        return workers

    assert len(asyncio.run(main())) == 2
