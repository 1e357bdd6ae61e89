"""Guest-side helpers: a private cgroup v2 subtree per test, with controllers enabled.

These tests run only inside the VM tier's guest (EXECD_IN_VM=1), where /sys/fs/cgroup
is a pure cgroup v2 hierarchy with every controller. Controllers are enabled top-down:
a cgroup can only offer a controller to its children once its parent offers it to it.
Processes live only in leaves (the kernel's no-internal-process rule).
"""

from __future__ import annotations

import itertools
import os
import select
import subprocess
import sys
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "cpu", "pids")
SUITE = CGROUP_ROOT / "execd-vm-tests"
serial = itertools.count()


def enable_controllers(cgroup: Path) -> None:
    """Offer memory, cpu and pids to `cgroup`'s children."""
    (cgroup / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))


def wait_unpopulated(cgroup: Path, timeout_s: float = 30) -> None:
    """Block until no process is left in `cgroup` or below (cgroup.events `populated 0`).

    The kernel signals every change of cgroup.events to poll() as POLLPRI.
    """
    deadline = time.monotonic() + timeout_s
    with (cgroup / "cgroup.events").open() as events:
        waiter = select.poll()
        waiter.register(events, select.POLLPRI)
        while "populated 1" in events.read():
            remaining_ms = (deadline - time.monotonic()) * 1000
            if remaining_ms <= 0 or not waiter.poll(remaining_ms):
                raise TimeoutError(f"{cgroup} is still populated after {timeout_s} s")
            events.seek(0)


class TestCgroup:
    """A test's own cgroup subtree: limits go on it or its leaves, processes in leaves."""

    __test__ = False  # a helper, not a test class

    def __init__(self, path: Path) -> None:
        self.path = path
        self.children: list[subprocess.Popen[str]] = []

    def read(self, name: str, cgroup: Path | None = None) -> str:
        return ((cgroup or self.path) / name).read_text()

    def write(self, name: str, value: str, cgroup: Path | None = None) -> None:
        ((cgroup or self.path) / name).write_text(value)

    def keyed(self, name: str, cgroup: Path | None = None) -> dict[str, int]:
        """A flat-keyed file such as memory.events or pids.events, as a dict."""
        pairs = (line.split() for line in self.read(name, cgroup).splitlines())
        return {key: int(value) for key, value in pairs}

    def leaf(self, name: str) -> Path:
        leaf = self.path / name
        leaf.mkdir()
        return leaf

    def spawn(self, leaf: Path, argv: list[str]) -> subprocess.Popen[str]:
        """Start argv already inside `leaf`: a shell joins it, then execs the program.

        Joining before exec means the program never runs outside the leaf, without a
        preexec_fn (unsafe in a threaded parent).
        """
        join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        child = subprocess.Popen(
            ["/bin/sh", "-c", join, str(leaf), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.children.append(child)
        return child

    def python(self, leaf: Path, code: str) -> subprocess.Popen[str]:
        """This interpreter without site imports: the guest is slow, start-up counts."""
        return self.spawn(leaf, [sys.executable, "-S", "-c", code])

    def remove(self) -> None:
        """Kill whatever is left in the subtree, then remove it bottom-up."""
        if not self.path.exists():
            return
        self.write("cgroup.kill", "1")
        for child in self.children:
            child.communicate()
        wait_unpopulated(self.path)
        for directory, _, _ in sorted(os.walk(self.path), key=lambda w: -len(w[0])):
            Path(directory).rmdir()
