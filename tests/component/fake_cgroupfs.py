"""A recording fake of the cgroup OS seam: an in-memory tree of interface files."""

from __future__ import annotations

from pathlib import Path

from execd.cgroups.fs import CgroupFS
from execd.errors import CgroupError


class RecordingCgroupFS(CgroupFS):
    """Files are a dict; every write is recorded in order; mkdir creates the files a
    kernel would (with the given controllers' interface files)."""

    def __init__(self, controllers: tuple[str, ...] = ("cpu", "memory", "pids")) -> None:
        self.files: dict[Path, str] = {}
        self.dirs: set[Path] = set()
        self.writes: list[tuple[Path, str]] = []
        self.killed: list[int] = []
        self.controllers = controllers

    def add_cgroup(self, path: Path) -> None:
        self.dirs.add(path)
        self.files.setdefault(path / "cgroup.procs", "")
        self.files.setdefault(path / "cgroup.controllers", " ".join(self.controllers))
        self.files.setdefault(path / "cgroup.subtree_control", "")
        self.files.setdefault(path / "cgroup.freeze", "0")
        self.files.setdefault(path / "cgroup.events", "populated 0\nfrozen 0\n")
        self.files.setdefault(path / "cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n")
        for c in self.controllers:
            for name in {
                "memory": (
                    "memory.max",
                    "memory.low",
                    "memory.swap.max",
                    "memory.oom.group",
                    "memory.current",
                    "memory.peak",
                    "memory.events",
                ),
                "cpu": ("cpu.weight", "cpu.max"),
                "pids": ("pids.max",),
            }.get(c, ()):
                self.files.setdefault(path / name, "0\n")

    def read(self, path: Path) -> str:
        if path not in self.files:
            raise CgroupError(f"cannot read {path}: No such file or directory")
        if path.name == "cgroup.events":
            # populated: any process in this cgroup or below, as the kernel reports it
            busy = any(
                text.strip()
                for f, text in self.files.items()
                if f.name == "cgroup.procs" and f.parent.is_relative_to(path.parent)
            )
            frozen = self.files[path].split("frozen ")[1][0]
            return f"populated {int(busy)}\nfrozen {frozen}\n"
        return self.files[path]

    def write(self, path: Path, value: str) -> None:
        if path not in self.files:
            raise CgroupError(f"cannot open {path} for writing: No such file or directory")
        self.writes.append((path, value))
        if path.name == "cgroup.freeze":
            ev = self.files[path.parent / "cgroup.events"].replace(
                f"frozen {1 - int(value)}", f"frozen {value}"
            )
            self.files[path.parent / "cgroup.events"] = ev
        elif path.name == "cgroup.subtree_control":
            have = set(self.files[path].split())
            have |= {v[1:] for v in value.split() if v.startswith("+")}
            self.files[path] = " ".join(sorted(have))
        else:
            self.files[path] = value

    def exists(self, path: Path) -> bool:
        return path in self.dirs or path in self.files

    def mkdir(self, path: Path) -> None:
        self.add_cgroup(path)

    def rmdir(self, path: Path) -> None:
        if self.files.get(path / "cgroup.procs", "").strip():
            raise CgroupError(f"cannot remove cgroup {path}: it still has processes")
        self.dirs.discard(path)
        for f in [f for f in self.files if f.parent == path]:
            del self.files[f]

    def children(self, path: Path) -> list[str]:
        return sorted(d.name for d in self.dirs if d.parent == path)

    def kill_pid(self, pid: int) -> None:
        self.killed.append(pid)
        for f, text in self.files.items():
            if f.name == "cgroup.procs":
                self.files[f] = "\n".join(p for p in text.split() if p != str(pid))
