"""Which files of the pool tier's chroot the pool tier needs: what the GPU bundle carries.

The chroot (`python tests/tiers.py setup`, Debian sid with HTCondor) is ~480 MB; most of
it (apt lists, perl, python, docs, locales) the tier never touches. The selection is:

- every directory and symbolic link (tiny; programs expect /var/lib/..., /run/lock, the
  merged-/usr links), except under the trees no pool program reads (DROPPED); a link's
  target only when another rule keeps it;
- all of /etc, /root and /home (configuration, passwd, the submitters' homes);
- every file of the packages in KEPT_PACKAGES (HTCondor's binaries, libexec programs
  such as condor_gpu_discovery, its libraries; the shell and the job programs);
- every file the pool tier was seen to read (TRACED, recorded by `trace-start`, a pool
  tier run, then `trace-collect`: files whose access time moved), and the source of each
  Python module whose bytecode was read (HTCondor's file transfer plugins run python3
  when the startd and starter ask them for their ClassAds);
- the shared libraries all of the above load, by the chroot's own `ldd`.

The lists name paths, never content: the bundle is always cut from the real chroot.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

TRACED = Path(__file__).with_name("chroot_traced.txt")
# condor: every daemon, tool and libexec program (condor_gpu_discovery among them) and
# their libraries. The rest: the shell and programs the tier's jobs and harness run.
KEPT_PACKAGES = ("condor", "coreutils", "dash", "bash", "grep", "sed", "passwd",
                 "libc-bin", "base-files", "procps", "findutils", "util-linux")  # fmt: skip
# Trees no pool program reads (documentation, translations, apt's and dpkg's databases,
# the interpreters the tier never starts). A traced or needed file there is still kept.
DROPPED = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
    "usr/share/lintian", "usr/share/perl", "usr/share/perl5", "usr/lib/x86_64-linux-gnu/perl",
    "usr/lib/x86_64-linux-gnu/perl5", "usr/lib/x86_64-linux-gnu/perl-base",
    "usr/lib/python3", "usr/lib/python3.14", "var/lib/apt", "var/cache", "var/lib/dpkg",
    "var/log", "usr/share/bash-completion", "usr/share/zsh", "usr/share/bootstrap-html",
    "usr/share/javascript", "usr/share/nodejs", "usr/include",
    # The pool's LOCAL_DIR: pool_harness wipes and remakes it at every start.
    "var/lib/execd-pool",
)  # fmt: skip
# Access times at or before this mark mean "not read since trace-start".
TRACE_MARK = "1971-01-01 00:00:00"
TRACE_MARK_EPOCH = 31536000  # the same instant, UTC
LDD_BATCH = 200
CHROOT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
# Kept whole: configuration, users, their homes, the device nodes debootstrap made.
KEPT_TREES = ("etc", "root", "home", "dev")


class PruneError(RuntimeError):
    """The chroot or the selection is not what the bundle needs (message says why)."""


def dropped(rel: str) -> bool:
    return any(rel == d or rel.startswith(d + "/") for d in DROPPED)


def walk(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """(chroot-relative path, lstat) of everything on root's filesystem, parents first."""
    device = root.stat().st_dev
    for top, dirs, files in os.walk(root):
        here = Path(top)
        keep_dirs = []
        for name in sorted(dirs) + sorted(files):
            path = here / name
            st = path.lstat()
            yield str(path.relative_to(root)), st
            if name in dirs and st.st_dev == device and not path.is_symlink():
                keep_dirs.append(name)
        dirs[:] = sorted(keep_dirs)  # another filesystem (a bind mount) is not descended


def resolve(root: Path, rel: str) -> str | None:
    """What `rel` names inside the chroot, symlinks followed as the chroot sees them
    (an absolute link target starts again at root); None for a loop or a dead end."""
    pending = [p for p in rel.split("/") if p]
    done: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        path = root.joinpath(*done, part)
        if path.is_symlink():
            hops += 1
            if hops > 40:
                return None
            target = os.readlink(path)
            if target.startswith("/"):
                done = []
            pending = [p for p in target.split("/") if p] + pending
            continue
        if not path.exists() and not path.is_symlink():
            return None
        done.append(part)
    return "/".join(done)


def package_files(root: Path, package: str) -> list[str]:
    """The paths dpkg lists for an installed package (chroot-relative)."""
    info = root / "var" / "lib" / "dpkg" / "info"
    for name in (f"{package}.list", f"{package}:amd64.list"):
        if (info / name).exists():
            return [line.strip().lstrip("/") for line in (info / name).read_text().splitlines()
                    if line.strip() not in ("", "/.")]  # fmt: skip
    raise PruneError(f"package {package!r} is not installed in {root}")


def traced_files() -> list[str]:
    return [line.strip() for line in TRACED.read_text().splitlines()
            if line.strip() and not line.startswith("#")]  # fmt: skip


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd(root: Path, files: Iterable[str]) -> tuple[set[str], list[str]]:
    """The libraries (absolute chroot paths) the chroot's ldd names for `files`, and the
    lines of those it cannot find ("file: libx.so => not found")."""
    wanted = sorted(files)
    found: set[str] = set()
    missing: list[str] = []
    for start in range(0, len(wanted), LDD_BATCH):
        batch = ["/" + f for f in wanted[start : start + LDD_BATCH]]
        # Several files: ldd heads each one's libraries with "file:". A static program
        # says "not a dynamic executable" and makes ldd exit 1: not an error here.
        done = subprocess.run(["chroot", str(root), "/usr/bin/ldd", *batch],
                              capture_output=True, text=True, check=False,
                              env={"PATH": CHROOT_PATH, "LC_ALL": "C"})  # fmt: skip
        current = batch[0]
        for line in done.stdout.splitlines():
            if not line.startswith("\t"):
                current = line.rstrip(":")
                continue
            text = line.strip()
            if "=> not found" in text:
                missing.append(f"{current}: {text}")
                continue
            path = text.split("=>")[-1].strip().split(" (")[0].strip()
            if path.startswith("/"):
                found.add(path.lstrip("/"))
    return found, missing


def select(root: Path) -> tuple[list[str], list[str]]:
    """The chroot-relative paths the bundle carries (parents before children), and the
    traced paths the chroot no longer has (a rebuilt chroot; reported, not fatal)."""
    # `links`: directories and symbolic links, carried as they are (a link's target only
    # when something else keeps it); `kept`: what must be there, links followed.
    links: set[str] = set()
    kept: set[str] = set()
    for rel, st in walk(root):
        if dropped(rel):
            continue
        if stat.S_ISDIR(st.st_mode) or stat.S_ISLNK(st.st_mode):
            links.add(rel)
        elif rel.split("/", 1)[0] in KEPT_TREES:
            kept.add(rel)
    for package in KEPT_PACKAGES:
        kept.update(p for p in package_files(root, package) if not dropped(p))
    stale = []
    for rel in traced_files():
        real = resolve(root, rel)
        if real is None:
            stale.append(rel)
            continue
        kept.add(real)
        # Python reads a module's cached bytecode, but only after a stat of its source
        # (no access time): without the .py beside __pycache__ the import fails.
        path = Path(real)
        if path.parent.name == "__pycache__" and path.suffix == ".pyc":
            source = path.parent.parent / (path.name.split(".", 1)[0] + ".py")
            if (root / source).exists():
                kept.add(str(source))
    # Symlinked names (/lib64/ld-linux..., /bin/sh) count by what they point to.
    files = set()
    for rel in kept:
        real = resolve(root, rel)
        if real is not None and (root / real).is_file():
            files.add(real)
    elves = {f for f in files if is_elf(root / f)}
    while elves:
        libs, _ = ldd(root, elves)
        new = {real for lib in libs if (real := resolve(root, lib)) and real not in files}
        files |= new
        elves = {f for f in new if is_elf(root / f)}
    kept |= files | links
    kept |= {str(p) for rel in kept for p in Path(rel).parents if str(p) != "."}
    return sorted(kept), stale


def trace_start(root: Path) -> int:
    """Set every file's access time to TRACE_MARK (relatime then moves it at the next
    read); returns how many files were marked."""
    count = 0
    for rel, st in walk(root):
        path = root / rel
        if path.is_file() and not path.is_symlink():
            os.utime(path, ns=(TRACE_MARK_EPOCH * 10**9, st.st_mtime_ns))
            count += 1
    return count


def trace_collect(root: Path) -> list[str]:
    """Files read since trace_start (access time past the mark), without those the
    selection keeps anyway (/etc, homes, the pool's LOCAL_DIR)."""
    read = []
    for rel, st in walk(root):
        path = root / rel
        if not path.is_file() or path.is_symlink() or st.st_atime <= TRACE_MARK_EPOCH + 86400:
            continue
        if rel.split("/", 1)[0] in ("etc", "root", "home", "tmp", "run", "dev"):
            continue
        # The pool's LOCAL_DIR is remade at each start; dpkg's lists are read by select()
        # itself (KEPT_PACKAGES), by no pool program.
        if rel.startswith(("var/lib/execd-pool/", "var/lib/dpkg/")):
            continue
        read.append(rel)
    return read
