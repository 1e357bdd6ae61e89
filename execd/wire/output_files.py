"""Which sandbox entries the output transfer sends back, and under which names, as
condor_starter's FileTransfer expands its list (condor_utils/file_transfer.cpp,
ExpandFileTransferList, ExpandParentDirectories, FindChangedFiles).

- `transfer_output_files` (TransferOutput) names files and directories. A directory is
  sent as a mkdir item (its mode), then everything in it, subdirectories included, under
  its own name; `dir/` (a trailing slash) sends only what is in it, as if it were in the
  sandbox's top level; `sub/file.txt` comes back as `file.txt` unless the job asks for
  `preserve_relative_paths`, which sends the parent directories first and keeps the path.
- Without it: every top-level regular file the job created or changed (a link to one
  included); subdirectories, and links to them, are not sent (FindChangedFiles skips a
  directory the list does not name).
- A name the job did not create stays in the list: sending it fails (ENOENT), which holds
  the job. FIFOs and sockets are left out (reading one could block the transfer).
- Symbolic links are followed as condor_starter follows them, reading as the job's user:
  a link to a file sends the file's bytes under the link's name; a link to a directory
  fails (EISDIR, "Transfer of symlinks to directories is not supported") unless named
  with a trailing slash. execd's daemon is root, so every file, and above all one
  behind a link out of the sandbox, is opened with the file-access ids and groups of
  the sandbox's owner (the job's user), in a thread of its own: what that user cannot
  read is not sent.
- Later entries for the same destination win (earlier duplicates are dropped).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as errnos
import os
import pwd
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

STD_FILES = ("_condor_stdout", "_condor_stderr")  # the shadow renames them to Out and Err
NULL_FILE = "/dev/null"


@dataclass(frozen=True)
class OutputItem:
    """One entry of the output transfer: `source` in the sandbox, sent as `name`."""

    source: str  # the path relative to the sandbox, as HTCondor names it in errors
    name: str  # the name the shadow writes it under, relative to the job's Iwd
    directory: bool = False  # a mkdir item
    mode: int = 0o644  # permission bits (of the link's target for a link)
    size: int = 0
    error: int = 0  # errno known from expansion: the entry is missing or unsendable
    linked_directory: bool = False  # a symlink to a directory: not supported
    outside: bool = False  # reached through a link that leaves the sandbox


def std_files(job: Mapping[str, object]) -> tuple[str | None, str | None]:
    """The sandbox names the job's stdout and stderr are written to and sent back under,
    as HTCondor's starter remaps them: `_condor_stdout` for Out, `_condor_stderr` for
    Err, but stdout's file for an Err that names Out's file (both streams go into it,
    in the order written); None for one that is unset or /dev/null (discarded)."""
    out, err = (job.get(attr) for attr in ("Out", "Err"))
    stdout = STD_FILES[0] if isinstance(out, str) and out not in ("", NULL_FILE) else None
    if not isinstance(err, str) or err in ("", NULL_FILE):
        return stdout, None
    return stdout, STD_FILES[0] if stdout is not None and err == out else STD_FILES[1]


def sent_std_files(job: Mapping[str, object]) -> list[str]:
    """The std files that go back to the shadow: each sandbox name once."""
    return [name for name in dict.fromkeys(std_files(job)) if name is not None]


def _inside(sandbox: Path, path: str) -> bool:
    real = os.path.realpath(path)
    return real == str(sandbox) or real.startswith(str(sandbox) + os.sep)


class _Expansion:
    """ExpandFileTransferList over one sandbox: items in order, parents made once."""

    def __init__(self, sandbox: Path, preserve: bool) -> None:
        self.sandbox = Path(os.path.realpath(sandbox))
        self.preserve = preserve
        self.items: list[OutputItem] = []
        self.preserved: set[str] = set()

    def full(self, src: str) -> str:
        return os.path.join(self.sandbox, src)

    def add(self, src: str, dest_dir: str, depth: int = -1) -> None:
        trailing = src.endswith("/")
        full = self.full(src.rstrip("/") or src)
        base = os.path.basename(src.rstrip("/"))
        name = f"{dest_dir}/{base}" if dest_dir else base
        parts = Path(src).parts
        if os.path.isabs(src) or ".." in parts:  # never read outside the sandbox by name
            self.items.append(OutputItem(src, name, error=errnos.EPERM))
            return
        try:
            st = os.lstat(full)
            link = stat.S_ISLNK(st.st_mode)
            outside = not _inside(self.sandbox, full)
            if link:
                st = os.stat(full)
        except OSError as exc:
            self.items.append(OutputItem(src, name, error=exc.errno or errnos.ENOENT))
            return
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            return  # as condor_starter: never sent, not an error
        mode = stat.S_IMODE(st.st_mode) & 0o777
        if not stat.S_ISDIR(st.st_mode):
            if self.preserve and os.path.dirname(src) not in ("", "."):
                dest_dir = os.path.dirname(src)
                if dest_dir not in self.preserved:
                    self.parents(dest_dir)
                name = f"{dest_dir}/{base}"
            self.items.append(OutputItem(src, name, mode=mode, size=st.st_size,
                                         outside=outside))  # fmt: skip
            return
        if link and not trailing:
            self.items.append(OutputItem(src, name, directory=True, mode=mode,
                                         linked_directory=True))  # fmt: skip
            return
        if outside:  # listing it would be reading outside the sandbox as root
            self.items.append(OutputItem(src, name, error=errnos.EACCES))
            return
        if depth == 0:
            self.items.append(OutputItem(src, name, directory=True, mode=mode))
            return
        if trailing:
            destination = dest_dir
        elif self.preserve:
            destination = src
            if src not in self.preserved:
                self.parents(src)
        else:
            self.items.append(OutputItem(src, name, directory=True, mode=mode))
            destination = name
        try:
            entries = sorted(os.listdir(full))
        except OSError as exc:
            self.items.append(OutputItem(src, name, error=exc.errno or errnos.EIO))
            return
        for entry in entries:
            self.add(f"{src}{'' if trailing else '/'}{entry}", destination, depth - 1)

    def parents(self, path: str) -> None:
        """ExpandParentDirectories: a mkdir item for each directory of `path`, root first."""
        parent = ""
        for part in Path(path).parts:
            partial = f"{parent}/{part}" if parent else part
            if partial not in self.preserved:
                self.add(partial, parent, depth=0)
                if os.path.isdir(self.full(partial)):
                    self.preserved.add(partial)
            parent = partial


def without_duplicates(items: list[OutputItem]) -> list[OutputItem]:
    """Of the files sent under one name, the last; of a directory made twice, the
    first (its contents follow it)."""
    last = {item.name: i for i, item in enumerate(items) if not item.directory}
    made: set[str] = set()
    kept = []
    for i, item in enumerate(items):
        if item.directory:
            if item.name in made:
                continue
            made.add(item.name)
        elif last[item.name] != i:
            continue
        kept.append(item)
    return kept


def expand_outputs(sandbox: Path, names: Sequence[str], *,
                   preserve: bool = False) -> list[OutputItem]:  # fmt: skip
    """The items the output transfer sends for these sandbox names, in order."""
    expansion = _Expansion(sandbox, preserve)
    for name in names:
        expansion.add(name, "")
    return without_duplicates(expansion.items)


def output_items(sandbox: Path, job: Mapping[str, object], inputs: Sequence[str],
                 before: Mapping[str, float]) -> list[OutputItem]:  # fmt: skip
    """What goes back: TransferOutput if the job names it, else every top-level regular
    file the job created or changed; and always the job's std files (sent_std_files:
    the shadow renames them to its Out/Err)."""
    std = sent_std_files(job)
    preserve = job.get("PreserveRelativePaths") is True
    listed = job.get("TransferOutput")
    if isinstance(listed, str) and listed.strip():
        chosen = [n.strip() for n in listed.split(",") if n.strip()]
        named = [n for n in chosen if n not in STD_FILES]
        return expand_outputs(sandbox, named + std, preserve=preserve)
    changed = []
    for entry in sorted(sandbox.iterdir()):
        if entry.name in STD_FILES or not entry.is_file():  # links followed, as StatInfo
            continue
        with contextlib.suppress(OSError):
            if entry.name in inputs and before.get(entry.name) == entry.stat().st_mtime:
                continue
            changed.append(entry.name)
    return expand_outputs(sandbox, changed + std)


# Linux's per-thread credentials: setfsuid/setfsgid change only the calling thread's
# file-access ids, and the raw setgroups system call only its groups (glibc's wrapper
# would change every thread's). Numbers of SYS_setgroups by machine.
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}


def open_as_owner(path: str, owner: tuple[int, int]) -> int:
    """A read descriptor of `path` opened with the job's user's (uid, gid) file-access
    rights, or OSError; never with root's. Call it in a thread of its own (it changes
    that thread's credentials for the open and restores them)."""
    uid, gid = owner
    number = _SYS_SETGROUPS.get(os.uname().machine)
    if uid == 0 or number is None:
        raise OSError(errnos.EACCES, os.strerror(errnos.EACCES), path)
    try:
        groups = os.getgrouplist(pwd.getpwuid(uid).pw_name, gid)
    except KeyError:
        groups = [gid]
    libc = ctypes.CDLL(None, use_errno=True)
    ours = os.getgroups()

    def set_groups(values: list[int]) -> None:
        array = (ctypes.c_uint * max(1, len(values)))(*values)
        if libc.syscall(number, len(values), array) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"setgroups: {os.strerror(code)}")

    set_groups(groups)
    try:
        libc.setfsgid(gid)
        libc.setfsuid(uid)
        try:
            if libc.setfsuid(-1) != uid or libc.setfsgid(-1) != gid:
                raise OSError(errnos.EPERM, "could not take the job user's file access ids")
            return os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        finally:
            libc.setfsuid(0)
            libc.setfsgid(0)
    finally:
        set_groups(ours)
