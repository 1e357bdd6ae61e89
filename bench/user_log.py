"""What a cluster's jobs left for their user: the user log's events and each job's files.

Used by bench_pool.py to tell when a cluster is done and to compare two runs of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HEADER = re.compile(r"^(\d{3}) \((\d+)\.(\d+)\.\d+\)")
TERMINATION = re.compile(r"(Normal|Abnormal) termination \((return value|signal) (-?\d+)\)")


@dataclass(frozen=True)
class Event:
    code: str  # "000" submitted, "001" executing, "005" terminated, "012" held, ...
    proc: int
    body: str


@dataclass(frozen=True)
class Outcome:
    """One job's end as its user sees it."""

    termination: str  # "Normal termination (return value 3)", or "" when none was logged
    stdout: str
    stderr: str
    result: str


def read_events(log: Path, cluster: int | None) -> list[Event]:
    """The user log's events of `cluster` in order ([] before the log exists)."""
    if cluster is None or not log.exists():
        return []
    events = []
    for block in log.read_text(errors="replace").split("...\n"):
        found = HEADER.match(block.lstrip("\n"))
        if found and int(found.group(2)) == cluster:
            events.append(Event(found.group(1), int(found.group(3)), block))
    return events


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else "<missing>"


def job_outcomes(job_dir: Path, jobs: int, events: list[Event]) -> dict[int, Outcome]:
    """Each job's termination line and its stdout, stderr and result files."""
    ended = {}
    for event in events:
        if event.code == "005":
            found = TERMINATION.search(event.body)
            ended[event.proc] = found.group(0) if found else event.body
    return {n: Outcome(ended.get(n, ""), _read(job_dir / "out" / f"{n}.out"),
                       _read(job_dir / "err" / f"{n}.err"),
                       _read(job_dir / "results" / f"{n}.txt")) for n in range(jobs)}  # fmt: skip
