"""The daemon's own memory footprint: fewer malloc arenas and helper threads.

What an execute point holds per running job is a benchmark target (bench/bench_pool.py,
issue 10). The daemon's threads are few and short (asyncio's default executor: a sandbox
removed, a benchmark run, name lookups), but glibc gives each new thread its own malloc
arena (64 MB reserved, its first pages dirtied and never given back) and asyncio's
default executor starts up to CPUs + 4 of them. With the GIL only one thread allocates
at a time anyway: one arena and two workers cost nothing in speed.
"""

from __future__ import annotations

import asyncio
import ctypes
from concurrent.futures import ThreadPoolExecutor

M_ARENA_MAX = -8  # glibc's malloc.h
EXECUTOR_WORKERS = 2


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """mallopt(M_ARENA_MAX): threads allocate from the main arena. Before any thread
    starts; True where the C library took it (glibc), False elsewhere (musl has none)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


def small_default_executor(loop: asyncio.AbstractEventLoop) -> None:
    """asyncio.to_thread and getaddrinfo run on EXECUTOR_WORKERS threads at most."""
    loop.set_default_executor(
        ThreadPoolExecutor(max_workers=EXECUTOR_WORKERS, thread_name_prefix="execd-io")
    )
