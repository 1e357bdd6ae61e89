"""The cgroup subtree execd owns and each job's place in it.

Layout (systemd delegation rules, DESIGN.md): `<mount>/<BASE_CGROUP>/` is ours; the
daemon lives in the leaf `<base>/daemon`, so the base has no processes of its own and
may enable controllers for its children; each job gets `<base>/<slot>.slice` carrying
the limits and a leaf `<slot>.slice/job` holding its processes. One writer per subtree.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.fs import CgroupFS
from execd.errors import CgroupError

# The controllers execd uses for limits, in the order the kernel wants them enabled.
LIMIT_CONTROLLERS = ("cpu", "memory", "pids")
# ... and those it enables for their accounting alone (io.stat: the job's block I/O).
ACCOUNTING_CONTROLLERS = ("io",)
EXECD_CONTROLLERS = (*LIMIT_CONTROLLERS, *ACCOUNTING_CONTROLLERS)
DAEMON_LEAF = "daemon"
JOB_LEAF = "job"
# condor_ssh_to_job sessions of the slot's job run beside its leaf (execd.wire.job_sshd).
SSHD_LEAF = "sshd"


class Usage(NamedTuple):
    """What a job's cgroup has used so far (microseconds, bytes, counts)."""

    user_usec: int
    system_usec: int
    memory_bytes: int  # memory.current (page cache, kernel memory), else /proc's resident sets
    processes: int
    # the resident set as condor_starter measures it on cgroup v2: memory.stat's anon +
    # shmem (no page cache); the processes' resident sets from /proc without the controller
    resident_bytes: int = 0


class BlockIO(NamedTuple):
    """A job's block device I/O so far (io.stat summed over devices)."""

    read_bytes: int
    write_bytes: int
    reads: int
    writes: int


def parse_io_stat(text: str) -> BlockIO:
    """io.stat's `MAJ:MIN rbytes=N wbytes=N rios=N wios=N ...` lines, summed; a cgroup
    that has done no I/O has an empty file (zeros)."""
    totals = dict.fromkeys(("rbytes", "wbytes", "rios", "wios"), 0)
    for line in text.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition("=")
            if key in totals and value.isdigit():
                totals[key] += int(value)
    return BlockIO(totals["rbytes"], totals["wbytes"], totals["rios"], totals["wios"])


def parse_flat_keyed(text: str) -> dict[str, int]:
    """Parse `key value` lines (cpu.stat, memory.events, memory.stat, cgroup.events)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


class CgroupTree:
    """The delegated subtree rooted at `<mount>/<base_name>`."""

    def __init__(self, fs: CgroupFS, hierarchy: Hierarchy, base_name: str) -> None:
        if not base_name or base_name.startswith("/") or ".." in base_name.split("/"):
            raise CgroupError(f"BASE_CGROUP {base_name!r} must be a relative cgroup path")
        self.fs = fs
        self.hierarchy = hierarchy
        self.base = hierarchy.mount / base_name

    @property
    def controllers(self) -> frozenset[str]:
        return self.hierarchy.controllers & frozenset(EXECD_CONTROLLERS)

    def setup(self, daemon_pid: int | None = None) -> None:
        """Create the base and the daemon leaf, move the daemon in, enable controllers."""
        self.fs.mkdir(self.base)
        leaf = self.base / DAEMON_LEAF
        self.fs.mkdir(leaf)
        if daemon_pid is not None:
            self.fs.write(leaf / "cgroup.procs", str(daemon_pid))
        self.enable_controllers(self.base)

    def enable_controllers(self, cgroup: Path) -> None:
        """Enable execd's controllers for `cgroup`'s children, top-down from the mount.

        The kernel refuses a controller in a child's subtree_control unless the parent
        enabled it too, so every level between the mount and `cgroup` gets it.
        """
        wanted = self.controllers
        if not wanted:
            return
        rel = cgroup.relative_to(self.hierarchy.mount)
        level = self.hierarchy.mount
        for part in ("", *rel.parts):
            level = level / part if part else level
            enabled = set(self.fs.read(level / "cgroup.subtree_control").split())
            missing = [c for c in EXECD_CONTROLLERS if c in wanted and c not in enabled]
            if missing:
                self.fs.write(level / "cgroup.subtree_control", " ".join("+" + c for c in missing))

    def job(self, slot_name: str) -> JobCgroup:
        if not slot_name or "/" in slot_name or slot_name.startswith("."):
            raise CgroupError(f"slot name {slot_name!r} cannot name a cgroup")
        return JobCgroup(self.fs, self.base / f"{slot_name}.slice", self.controllers)

    def cpu_usage_usec(self, slots: list[str]) -> dict[str, int]:
        """Slot -> CPU microseconds its job used so far; slots without a cgroup left out."""
        usage: dict[str, int] = {}
        for slot in slots:
            try:
                usage[slot] = self.job(slot).cpu_usage_usec()
            except CgroupError:  # not created yet, or just removed
                continue
        return usage

    def remove(self) -> None:
        """Remove the whole subtree once the daemon has exited (tests; uninstall). Kills
        what is still inside: jobs, and in the daemon's leaf a killed daemon's starter
        zygote that has not yet seen its request pipe close."""
        for name in self.fs.children(self.base):
            if name == DAEMON_LEAF:
                continue
            JobCgroup(self.fs, self.base / name, frozenset()).destroy()
        JobCgroup(self.fs, self.base / DAEMON_LEAF, frozenset()).kill()
        self.fs.rmdir(self.base / DAEMON_LEAF)
        self.fs.rmdir(self.base)


class JobCgroup:
    """One job's `<slot>.slice` (limits) with its `job` leaf (processes)."""

    def __init__(self, fs: CgroupFS, slice_path: Path, controllers: frozenset[str]) -> None:
        self.fs = fs
        self.slice = slice_path
        self.leaf = slice_path / JOB_LEAF
        self.sshd = slice_path / SSHD_LEAF
        self.controllers = controllers
        # How long a kill may take before the slice counts as one that cannot be emptied.
        self.kill_timeout = 5.0

    @property
    def procs_file(self) -> Path:
        """The file the job's first process writes its pid into before exec."""
        return self.leaf / "cgroup.procs"

    def create(self) -> None:
        self.fs.mkdir(self.slice)
        self.fs.mkdir(self.leaf)

    def apply_limits(self, writes: dict[str, str]) -> None:
        """Write each limit file on the slice (a LimitPlan's `writes`)."""
        for name, value in writes.items():
            self.fs.write(self.slice / name, value)

    def add(self, pid: int) -> None:
        self.fs.write(self.procs_file, str(pid))

    def pids(self) -> list[int]:
        """Every process in the slice (the leaf and anything the job nested under it)."""
        found: list[int] = []
        stack = [self.slice]
        while stack:
            cg = stack.pop()
            if not self.fs.exists(cg):
                continue
            found.extend(int(p) for p in self.fs.read(cg / "cgroup.procs").split())
            stack.extend(cg / c for c in self.fs.children(cg))
        return found

    def populated(self) -> bool:
        if not self.fs.exists(self.slice):
            return False
        return parse_flat_keyed(self.fs.read(self.slice / "cgroup.events")).get("populated") == 1

    def _events(self) -> dict[str, int]:
        return parse_flat_keyed(self.fs.read(self.slice / "cgroup.events"))

    def freeze(self, timeout: float = 5.0) -> None:
        """Freeze every process of the job and wait until the kernel says `frozen 1`."""
        self.fs.write(self.slice / "cgroup.freeze", "1")
        self._wait_frozen(1, timeout)

    def thaw(self, timeout: float = 5.0) -> None:
        self.fs.write(self.slice / "cgroup.freeze", "0")
        self._wait_frozen(0, timeout)

    def frozen(self) -> bool:
        return self._events().get("frozen") == 1

    def _wait_frozen(self, want: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.0005
        while self._events().get("frozen") != want:
            if time.monotonic() > deadline:
                raise CgroupError(f"{self.slice} did not reach frozen={want} in {timeout}s")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def kill(self, timeout: float | None = None) -> None:
        """Kill every process in the slice and wait until it is empty.

        cgroup.kill (5.14+) kills atomically, forks included; SIGKILL to every listed pid
        is the fallback for older kernels and a second sweep for stragglers.
        """
        if not self.fs.exists(self.slice):
            return
        timeout = self.kill_timeout if timeout is None else timeout
        kill_file = self.slice / "cgroup.kill"
        has_kill = self.fs.exists(kill_file)
        if has_kill:
            self.fs.write(kill_file, "1")
        deadline = time.monotonic() + timeout
        # With cgroup.kill the kernel does the work: wait for `populated 0` (one small
        # read) and only fall back to signalling pids if that takes a while.
        fallback_at = time.monotonic() + (0.5 if has_kill else 0.0)
        delay = 0.0005
        while True:
            if not self.populated():
                return
            now = time.monotonic()
            if now >= fallback_at:
                pids = self.pids()
                if not pids:
                    return
                for pid in pids:
                    self.fs.kill_pid(pid)
                if now > deadline:
                    raise CgroupError(
                        f"{self.slice} still holds {len(pids)} processes after {timeout}s "
                        f"of killing (first: {pids[:5]})"
                    )
            time.sleep(delay)
            delay = min(delay * 2, 0.005)

    def usage(self) -> Usage:
        """CPU from cpu.stat; memory from memory.current and memory.stat, else summed
        from /proc (hybrid: no memory controller)."""
        cpu = parse_flat_keyed(self.fs.read(self.slice / "cpu.stat"))
        pids = self.pids()
        current = self.slice / "memory.current"
        if "memory" in self.controllers and self.fs.exists(current):
            memory = int(self.fs.read(current))
            resident = self._anon_and_shmem()
        else:
            memory = resident = self._rss_of(pids)
        return Usage(
            user_usec=cpu.get("user_usec", 0),
            system_usec=cpu.get("system_usec", 0),
            memory_bytes=memory,
            processes=len(pids),
            resident_bytes=resident,
        )

    def _anon_and_shmem(self) -> int:
        # What condor_starter calls the job's resident set on cgroup v2
        # (ProcFamilyDirectCgroupV2::get_usage): memory.current counts the page cache of
        # every file the job read or wrote, which a job that copies a few hundred MiB
        # would report as its memory for the rest of its run.
        stat = self.memory_stat()
        return stat.get("anon", 0) + stat.get("shmem", 0)

    def memory_stat(self) -> dict[str, int]:
        """memory.stat's counters (bytes); empty without the memory controller."""
        stat = self.slice / "memory.stat"
        if "memory" not in self.controllers or not self.fs.exists(stat):
            return {}
        return parse_flat_keyed(self.fs.read(stat))

    def cpu_usage_usec(self) -> int:
        """CPU time the job used so far (cpu.stat's usage_usec: there without controllers)."""
        return parse_flat_keyed(self.fs.read(self.slice / "cpu.stat")).get("usage_usec", 0)

    def block_io(self) -> BlockIO | None:
        """The job's block I/O from the slice's io.stat (it counts the job leaf and any
        cgroup nested in it); None without the io controller: not measured, not zero."""
        stat = self.slice / "io.stat"
        if "io" not in self.controllers or not self.fs.exists(stat):
            return None
        return parse_io_stat(self.fs.read(stat))

    def memory_peak(self) -> int | None:
        peak = self.slice / "memory.peak"
        if "memory" in self.controllers and self.fs.exists(peak):
            return int(self.fs.read(peak))
        return None

    def _rss_of(self, pids: list[int]) -> int:
        total = 0
        for pid in pids:
            try:
                fields = self.fs.read(Path(f"/proc/{pid}/statm")).split()
            except CgroupError:
                continue  # it exited between listing and reading
            if len(fields) > 1:
                total += int(fields[1]) * os.sysconf("SC_PAGE_SIZE")
        return total

    def oom_events(self) -> dict[str, int]:
        """oom / oom_kill / oom_group_kill counters; empty without the memory controller."""
        events = self.slice / "memory.events"
        if "memory" not in self.controllers or not self.fs.exists(events):
            return {}
        return parse_flat_keyed(self.fs.read(events))

    def destroy(self, timeout: float | None = None) -> None:
        """Kill what is left and remove the leaf, any nested cgroups, and the slice."""
        self.kill(timeout)
        stack = [self.slice]
        order: list[Path] = []
        while stack:
            cg = stack.pop()
            order.append(cg)
            stack.extend(cg / c for c in self.fs.children(cg))
        for cg in reversed(order):
            self.fs.rmdir(cg)
