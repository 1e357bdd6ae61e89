"""Which sandbox entries the output transfer sends back, and under which names, as
condor_starter's FileTransfer expands its list (condor_utils/file_transfer.cpp,
ExpandFileTransferList, ExpandParentDirectories, FindChangedFiles).

- `transfer_output_files` (TransferOutput) names files and directories. A directory is
  sent as a mkdir item (its mode), then everything in it, subdirectories included, under
  its own name; `dir/` (a trailing slash) sends only what is in it, as if it were in the
  sandbox's top level; `sub/file.txt` comes back as `file.txt` unless the job asks for
  `preserve_relative_paths`, which sends the parent directories first and keeps the path.
- Without it: every top-level regular file the job created or changed (a link to one
  included) but the transferred executable, even rewritten (FindChangedFiles skips
  ExecFile), and the job's X509 proxy (the basename of X509UserProxy, which the job ad
  spells x509userproxy: FindChangedFiles skips it, changed or not); subdirectories, and
  links to them, are not sent (it skips a directory the list does not name).
- Never sent, named or not: `.chirp.config`, `.job.ad`, `.machine.ad` and `.update.ad`
  (condor_starter's ALWAYS_EXCLUDED_FILES; execd/starter/ad_files.py).
- A name the job did not create stays in the list: sending it fails (ENOENT), which holds
  the job. FIFOs and sockets are left out (reading one could block the transfer). A
  device (a link to /dev/zero, to a tty) is sent as an empty file with its mode, as
  condor_starter's put_file sends it, but never opened: opening a tty could make it
  the daemon's controlling terminal.
- Symbolic links are followed as condor_starter follows them, reading as the job's user:
  a link to a file sends the file's bytes under the link's name; a link to a directory
  fails (EISDIR, "Transfer of symlinks to directories is not supported") unless named
  with a trailing slash (then listed only inside the sandbox). The listing runs in the
  upload's thread with the job user's file-access ids (execd/wire/owner_thread.py), as
  condor_starter's runs as the user: a directory the user cannot list sends only its
  mkdir, a device the user cannot read fails (EACCES).
- At most MAX_OUTPUT_ITEMS items (those listed and those still waiting to be), MAX_DEPTH
  levels, MAX_NAME_BYTES of names held at once and paths within PATH_MAX: past them
  OutputListError (the job is held, 13), not a listing that holds the daemon's memory
  or a recursion that crashes the upload.
- Later entries for the same destination win (earlier duplicates are dropped).
"""

from __future__ import annotations

import contextlib
import errno as errnos
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from execd.classads import lookup_bool
from execd.starter.ad_files import NEVER_SENT_BACK
from execd.wire.owner_thread import file_access_ids

STD_FILES = ("_condor_stdout", "_condor_stderr")  # the shadow renames them to Out and Err
NULL_FILE = "/dev/null"
CHIRP_CONFIG = ".chirp.config"  # the job's Chirp address and cookie: never sent back
# Bounds on one output listing (condor_starter has none; a job's millions of files or a
# thousand-level tree must not hold the daemon): past them the job goes on hold.
MAX_OUTPUT_ITEMS = 100_000
MAX_DEPTH = 1000
# the names held while listing (each item's source and name, each entry waiting to be
# listed): 100,000 paths near PATH_MAX would otherwise be about 800 MB of strings
MAX_NAME_BYTES = 64 << 20
PATH_MAX = 4096  # Linux's: a longer path cannot be opened by name


def spooled_output_files(sent: list[str]) -> str:
    """SpooledOutputFiles, as condor_starter's transfer records what it sent (for a
    spooled job's later retrieval): the names at the top of the sandbox (a directory,
    not its contents), in the order sent, but stdout and stderr; comma-separated."""
    return ",".join(name for name in sent if "/" not in name and name not in STD_FILES)


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
    device: bool = False  # not a regular file (a device): sent empty, never opened
    inode: tuple[int, int] = (0, 0)  # (st_dev, st_ino) listed: the file opened must be it
    link: bool = False  # a symlink: resolved again to be opened (else opened by its path)


def std_files(job: Mapping[str, object]) -> tuple[str | None, str | None]:
    """The sandbox names the job's stdout and stderr are written to and sent back under,
    as HTCondor's starter remaps them: `_condor_stdout` for Out, `_condor_stderr` for
    Err, but stdout's file for an Err that names Out's file (both streams go into it,
    in the order written); None for one that is unset or /dev/null (discarded), or
    streamed (StreamOut/StreamErr: written to the shadow's file as the job runs,
    execd/wire/stream_output.py, never in the sandbox)."""
    out, err = (job.get(attr) for attr in ("Out", "Err"))
    if lookup_bool(job.get("StreamOut")) is True:
        out = None
    if lookup_bool(job.get("StreamErr")) is True:
        err = None
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


class OutputListError(OSError):
    """The output cannot be listed within execd's bounds (MAX_OUTPUT_ITEMS, MAX_DEPTH):
    the job goes on hold (13) with this reason instead of the daemon listing forever."""


def _readable(st: os.stat_result) -> bool:
    """Whether the calling thread's file-access ids may read it, by its mode bits (for
    a device, which is never opened)."""
    uid, gid = file_access_ids()
    if uid == 0:
        return True
    bit = stat.S_IRUSR if st.st_uid == uid else stat.S_IRGRP if st.st_gid == gid \
        else stat.S_IROTH  # fmt: skip
    return bool(st.st_mode & bit)


def _too_many(where: str = "") -> OutputListError:
    return OutputListError(errnos.E2BIG, f"more than {MAX_OUTPUT_ITEMS} output files and "
                           f"directories{f' (in {where[:200]})' if where else ''}")  # fmt: skip


def _names_too_long(where: str) -> OutputListError:
    return OutputListError(errnos.E2BIG, f"the output's file names take more than "
                           f"{MAX_NAME_BYTES} bytes (in {where[:200]}...)")  # fmt: skip


def _listing(full: str, room: int, byte_room: int = MAX_NAME_BYTES) -> list[str]:
    """The names in a directory, sorted; OutputListError past `room` of them or past
    `byte_room` bytes of names, or for an entry whose path is longer than PATH_MAX
    (read no further: a directory of millions is not held in memory)."""
    names = []
    held = 0
    with os.scandir(full) as entries:
        for entry in entries:
            names.append(entry.name)
            held += len(entry.name)
            if len(names) > room:
                raise _too_many(full)
            if held > byte_room:
                raise _names_too_long(full)
            if len(full) + 1 + len(entry.name) >= PATH_MAX:
                raise OutputListError(errnos.ENAMETOOLONG, f"{full[:200]}...: a path longer "
                                      f"than {PATH_MAX} bytes")  # fmt: skip
    return sorted(names)


class _Expansion:
    """ExpandFileTransferList over one sandbox: items in order, parents made once. It
    walks with a stack of its own, not by recursion (a tree a thousand levels deep is
    a job's to make), within MAX_DEPTH and MAX_OUTPUT_ITEMS."""

    def __init__(self, sandbox: Path, preserve: bool) -> None:
        self.sandbox = Path(os.path.realpath(sandbox))
        self.preserve = preserve
        self.items: list[OutputItem] = []
        self.preserved: set[str] = set()
        self.pending: list[tuple[str, str]] = []  # (src, dest_dir) still to be added
        self.held = 0  # bytes of the names in items and pending (within MAX_NAME_BYTES)

    def full(self, src: str) -> str:
        return os.path.join(self.sandbox, src)

    def append(self, item: OutputItem) -> None:
        self.items.append(item)
        self.held += len(item.source) + len(item.name)
        if self.held > MAX_NAME_BYTES:
            raise _names_too_long(item.source)

    def expand(self, src: str, dest_dir: str) -> None:
        """One listed name and, for a directory, everything in it (depth first)."""
        self.pending = [(src, dest_dir)]
        listed = False  # src is the job's name, not an entry of a directory listed here
        while self.pending:
            entry, parent = self.pending.pop()
            self.held -= len(entry) + len(parent) if listed else 0
            children = self.add(entry, parent, listed=listed)
            listed = True
            self.held += sum(len(child) + len(dest) for child, dest in children)
            if self.held > MAX_NAME_BYTES:
                raise _names_too_long(entry)
            self.pending.extend(reversed(children))

    def add(self, src: str, dest_dir: str, depth: int = -1,
            listed: bool = False) -> list[tuple[str, str]]:  # fmt: skip
        """The item for `src`; for a directory to expand, its entries (src, dest_dir).
        `listed`: src is an entry of a directory inside the sandbox, which only a link
        can leave (the path is resolved only then: a resolution per item would lstat
        every level of a deep tree for each of its files)."""
        trailing = src.endswith("/")
        full = self.full(src.rstrip("/") or src)
        base = os.path.basename(src.rstrip("/"))
        name = f"{dest_dir}/{base}" if dest_dir else base
        parts = Path(src).parts
        if os.path.isabs(src) or ".." in parts:  # never read outside the sandbox by name
            self.append(OutputItem(src, name, error=errnos.EPERM))
            return []
        if len(parts) > MAX_DEPTH:
            raise OutputListError(errnos.ENAMETOOLONG, f"{src[:200]}...: directories "
                                  f"deeper than {MAX_DEPTH} levels")  # fmt: skip
        if len(self.items) >= MAX_OUTPUT_ITEMS:
            raise _too_many()
        try:
            st = os.lstat(full)
            link = stat.S_ISLNK(st.st_mode)
            resolve = link or (not listed and len(parts) > 1)
            outside = resolve and not _inside(self.sandbox, full)
            if link:
                st = os.stat(full)
        except OSError as exc:
            self.append(OutputItem(src, name, error=exc.errno or errnos.ENOENT))
            return []
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            return []  # as condor_starter: never sent, not an error
        mode = stat.S_IMODE(st.st_mode) & 0o777
        if not stat.S_ISDIR(st.st_mode):
            if self.preserve and os.path.dirname(src) not in ("", "."):
                dest_dir = os.path.dirname(src)
                if dest_dir not in self.preserved:
                    self.parents(dest_dir)
                name = f"{dest_dir}/{base}"
            device = not stat.S_ISREG(st.st_mode)  # sent empty, as put_file, never opened
            error = errnos.EACCES if device and not _readable(st) else 0
            self.append(OutputItem(src, name, mode=mode, size=0 if device else st.st_size,
                                     outside=outside, device=device, error=error,
                                     inode=(st.st_dev, st.st_ino), link=link))  # fmt: skip
            return []
        if link and not trailing:
            self.append(OutputItem(src, name, directory=True, mode=mode,
                                   linked_directory=True))  # fmt: skip
            return []
        if outside:  # listing it would be reading outside the sandbox
            self.append(OutputItem(src, name, error=errnos.EACCES))
            return []
        if depth == 0:
            self.append(OutputItem(src, name, directory=True, mode=mode))
            return []
        if trailing:
            destination = dest_dir
        elif self.preserve:
            destination = src
            if src not in self.preserved:
                self.parents(src)
        else:
            self.append(OutputItem(src, name, directory=True, mode=mode))
            destination = name
        try:
            room = MAX_OUTPUT_ITEMS - len(self.items) - len(self.pending)
            entries = _listing(full, room, MAX_NAME_BYTES - self.held)
        except OutputListError:
            raise
        except OSError:  # as condor_starter's Directory: one it cannot open lists nothing
            return []
        return [(f"{src}{'' if trailing else '/'}{entry}", destination) for entry in entries]

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
        expansion.expand(name, "")
    return without_duplicates(expansion.items)


def output_items(sandbox: Path, job: Mapping[str, object], inputs: Sequence[str],
                 before: Mapping[str, float]) -> list[OutputItem]:  # fmt: skip
    """What goes back: TransferOutput if the job names it, else every top-level regular
    file the job created or changed but its transferred executable and its X509 proxy;
    and always the job's std files (sent_std_files: the shadow renames them to its
    Out/Err)."""
    std = sent_std_files(job)
    preserve = job.get("PreserveRelativePaths") is True
    listed = job.get("TransferOutput")
    if isinstance(listed, str) and listed.strip():
        chosen = [n.strip() for n in listed.split(",") if n.strip()]
        named = [n for n in chosen
                 if n not in STD_FILES and n != CHIRP_CONFIG and n not in NEVER_SENT_BACK]
        return expand_outputs(sandbox, named + std, preserve=preserve)
    try:
        names = _listing(str(sandbox), MAX_OUTPUT_ITEMS)
    except OutputListError:
        raise
    except OSError:  # the job took its user's rights on its sandbox away: as Directory
        names = []
    executable = os.path.basename(str(job.get("Cmd", "")))
    # attribute names are caseless: condor_submit writes this one "x509userproxy"
    proxy = next((v for k, v in job.items() if k.lower() == "x509userproxy"), None)
    proxy_name = os.path.basename(proxy) if isinstance(proxy, str) and proxy else None
    changed = []
    for name in names:
        entry = sandbox / name
        if name in STD_FILES or name in (CHIRP_CONFIG, proxy_name) or name in NEVER_SENT_BACK \
                or not entry.is_file():
            continue  # (links followed)
        if name == executable and name in inputs:
            continue
        with contextlib.suppress(OSError):
            if name in inputs and before.get(name) == entry.stat().st_mtime:
                continue
            changed.append(name)
    return expand_outputs(sandbox, changed + std)


def input_baseline(sandbox: str) -> dict[str, float]:
    """The sandbox's top-level regular files and their mtimes before the job (what
    output_items compares against), as condor_starter's BuildFileCatalog: listed and
    stat'ed in the caller's thread, run with the job user's file-access ids (a link is
    followed as the user follows it); an entry that cannot be stat'ed (EACCES from a
    FUSE mount, ENOTCONN, a dangling link) is left out, never an error."""
    found: dict[str, float] = {}
    try:
        entries = os.scandir(sandbox)
    except OSError:
        return found
    with entries:
        for entry in entries:
            try:
                info = os.stat(entry.path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[entry.name] = info.st_mtime
    return found
