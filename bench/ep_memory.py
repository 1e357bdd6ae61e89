"""An execute point's memory while it runs jobs: PSS of the EP daemon and its starters.

Used by bench_pool.py. An EP is a daemon process (condor_startd, or `execd run`) and the
processes below it that belong to it, told apart from the jobs by their command name
(/proc/PID/comm): condor_startd's starters are `condor_starter` (and the children they
fork for file transfers, also `condor_starter`); execd's starter zygote and the starters
it forks are the daemon's own Python. Anything else below an EP process is a job: it is
counted as a job process and not walked further (its memory is the job's, not the EP's).

Running jobs are counted as the job sandboxes in the EP's EXECUTE directory: both
condor_starter and execd's starter make `EXECUTE/dir_<starter pid>` when they start
and remove it when they are done, so a sandbox is a job the EP holds a starter for,
from input transfer to output transfer (its process may run for a part of that only).

PSS (proportional set size, /proc/PID/smaps_rollup) charges each shared page to the
processes sharing it in equal parts, so that the sum over processes is the memory they
use together: forked starters sharing their parent's pages are not counted twice.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the sampler started
    pss_kb: int  # the EP's processes together
    processes: int  # how many EP processes (daemon, starters, their helpers)
    jobs: int  # running jobs: sandboxes in EXECUTE
    job_processes: int  # non-EP children of EP processes


def _stat(pid: str) -> tuple[int, str] | None:
    """(ppid, comm) of a process, or None once it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm is in parentheses and may itself hold spaces and parentheses
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return int(text[text.rindex(")") + 2 :].split()[1]), comm


def smaps_rollup_kb(pid: int) -> dict[str, int]:
    """A process's /proc/PID/smaps_rollup, field -> kB (Rss, Pss, Private_Dirty, ...);
    OSError once it has gone."""
    lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]  # [1:]: the range
    return {line.split(":")[0]: int(line.split()[1]) for line in lines}


def pss_kb(pid: int) -> int:
    """A process's PSS in kB (0 once it has gone)."""
    try:
        return smaps_rollup_kb(pid).get("Pss", 0)
    except OSError:
        return 0


def ep_processes(root: int, ep_names: frozenset[str]) -> tuple[list[int], int]:
    """The EP's pids (root and the EP processes below it) and its number of running jobs."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found = _stat(entry.name)
            if found is not None:
                children.setdefault(found[0], []).append((int(entry.name), found[1]))
    ep, jobs, todo = [root], 0, [root]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            if comm in ep_names:
                ep.append(pid)
                todo.append(pid)
            else:
                jobs += 1
    return ep, jobs


def comm_of(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def sandboxes(execute_dir: Path) -> int:
    try:
        return sum(1 for entry in execute_dir.iterdir() if entry.name.startswith("dir_"))
    except OSError:
        return 0  # not made yet


@dataclass(frozen=True)
class ExecutePoint:
    """What is sampled: the EP daemon, its processes' command names, its EXECUTE."""

    root_pid: int
    names: frozenset[str]
    execute_dir: Path

    def sample(self, t: float) -> Sample:
        pids, job_processes = ep_processes(self.root_pid, self.names)
        pss = sum(pss_kb(pid) for pid in pids)
        return Sample(t, pss, len(pids), sandboxes(self.execute_dir), job_processes)


@dataclass
class Sampler:
    """Samples an EP every `every_s` seconds in a thread, from start() to stop()."""

    ep: ExecutePoint
    every_s: float = 0.2
    samples: list[Sample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, name="ep-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self.samples

    def _run(self) -> None:
        t0 = time.monotonic()
        while True:
            self.samples.append(self.ep.sample(time.monotonic() - t0))
            if self._stop.wait(self.every_s):
                return


def idle_pss_kb(ep: ExecutePoint, seconds: float, every_s: float) -> int:
    """The EP's PSS with no job: the median of samples over `seconds`."""
    found = []
    deadline = time.monotonic() + seconds
    while True:
        found.append(ep.sample(0.0).pss_kb)
        if time.monotonic() >= deadline:
            return int(statistics.median(found))
        time.sleep(every_s)
