"""Build .gpu/: everything the pool tier needs on a GPU machine that has no network.

    python tests/gpu/bundle.py build           # `make gpu-bundle` (root: reads the chroot)
    python tests/gpu/bundle.py trace-start     # then run the pool tier, then:
    python tests/gpu/bundle.py trace-collect   # rewrites tests/gpu/chroot_traced.txt

`build` cuts the pool tier's chroot (tiers.pool_root(), EXECD_POOL_ROOT) down to what the
tier uses (chroot_prune.py), checks that the cut tree still runs HTCondor and resolves
every library, and writes into .gpu/ (git-ignored):

    chroot.tar.xz   the pruned chroot, numeric owners (the device's passwd differs)
    wheels/         cp312 wheels of what execd and its tests import that the device's
                    image lacks (its package list: /work/.library/device/KINDS.md)
    MANIFEST.txt    sizes, the HTCondor version, the file count

tests/gpu/run_on_device.sh unpacks it on the device and runs the pool tests
(tests/gpu/README.md). The device takes the working tree plus carried folders, at most
64 MiB in all: `build` fails when tree + .gpu/ would not fit.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import chroot_prune

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
import tiers  # noqa: E402  (tests/tiers.py, beside this folder)

OUT = REPO / ".gpu"
ARCHIVE = "chroot.tar.xz"
CARRY_LIMIT = 64 * 2**20
# What execd (pyproject dependencies) and its tests import that the device image does not
# hold (KINDS.md lists psutil, nvidia-ml-py, pytest, hypothesis, typing-extensions there),
# with what those need in turn. Versions are this interpreter's: the ones tested here.
CARRIED = ("htcondor", "structlog", "pyroute2", "python-daemon", "lockfile",
           "cryptography", "cffi", "pycparser", "pytest-asyncio")  # fmt: skip
DEVICE_PYTHON = "3.12"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip
# Programs the harness, the pool and the tier's jobs run inside the chroot: checked in the
# unpacked bundle, so that a pruning mistake fails here and not on the device.
MUST_RUN = ("/usr/sbin/condor_master", "/usr/libexec/condor/condor_gpu_discovery",
            "/usr/bin/condor_submit", "/usr/bin/condor_status", "/usr/sbin/useradd",
            "/bin/sh", "/usr/bin/env", "/usr/bin/sort", "/usr/bin/grep", "/usr/bin/cat",
            "/usr/bin/sleep", "/usr/bin/id", "/usr/sbin/ldconfig")  # fmt: skip


class BundleError(RuntimeError):
    """The bundle cannot be built as asked (message names the step)."""


def normalized(name: str) -> str:
    """A distribution's name as wheel file names spell it (PEP 427, lower case)."""
    return name.replace("-", "_").replace(".", "_").lower()


def wheel_dist(filename: str) -> tuple[str, str]:
    """(normalized distribution name, version) of a wheel's file name."""
    name, version = filename.split("-")[:2]
    return normalized(name), version


def fetch_wheels(dest: Path) -> list[Path]:
    """One wheel per CARRIED distribution, at this interpreter's version, in dest: from
    the repo's .whl/ or dest itself when there, else from the package index."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for name in CARRIED:
        try:
            wanted[normalized(name)] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise BundleError(f"{name} is not installed here (make venv): {exc}") from exc
    for old in dest.glob("*.whl"):  # two versions of one package stop pip's install
        dist, version = wheel_dist(old.name)
        if wanted.get(dist) != version:
            old.unlink()
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    for dist, version in sorted(wanted.items()):
        spec = f"{dist}=={version}"
        base = [sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                "--only-binary=:all:", "--python-version", DEVICE_PYTHON,
                "--implementation", "cp", *platforms, "-d", str(dest), spec]  # fmt: skip
        local = ["--no-index", "--find-links", str(dest), "--find-links", str(REPO / ".whl")]
        done = subprocess.run([*base, *local], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            done = subprocess.run(base, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BundleError(f"no {DEVICE_PYTHON} wheel of {spec}: {done.stderr.strip()}")
    return sorted(dest.glob("*.whl"))


def write_archive(root: Path, paths: list[str], archive: Path) -> None:
    partial = archive.with_name(archive.name + ".partial")
    with tempfile.NamedTemporaryFile(prefix="execd-gpu-files-") as listing:
        listing.write(b"".join(os.fsencode(p) + b"\0" for p in paths))
        listing.flush()
        _tar_xz(root, Path(listing.name), partial)
    partial.rename(archive)


def _tar_xz(root: Path, listing: Path, partial: Path) -> None:
    with partial.open("wb") as out:
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--no-recursion", "--null", "-C", str(root),
             "-T", str(listing), "-cf", "-"],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        xz = subprocess.run(["xz", "-9e", "-T1", "-c"], stdin=tar.stdout, stdout=out,
                            check=False)  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or xz.returncode != 0:
            raise BundleError(f"tar ({tar.returncode}) | xz ({xz.returncode}) of {root} failed")


def check_unpacked(source: Path, archive: Path) -> tuple[str, int]:
    """Unpack as the device does, then: HTCondor runs, MUST_RUN are there, every ELF
    finds the libraries it finds in the source chroot (a plugin such as systemd's
    libsystemd-core finds its own only when its program loads it). Returns
    (condor_version's first line, unpacked bytes)."""
    with tempfile.TemporaryDirectory(prefix="execd-gpu-check-", dir="/var/tmp") as tmp:
        root = Path(tmp) / "pool"
        root.mkdir()
        subprocess.run(["tar", "--numeric-owner", "-xJf", str(archive), "-C", str(root)],
                       check=True)  # fmt: skip
        absent = [p for p in MUST_RUN if chroot_prune.resolve(root, p) is None]
        if absent:
            raise BundleError(f"the pruned chroot lacks {absent}")
        version = subprocess.run(["chroot", str(root), "condor_version"], capture_output=True,
                                 text=True, check=False)  # fmt: skip
        if version.returncode != 0:
            raise BundleError(f"condor_version fails in the pruned chroot: {version.stderr}")
        elves = [rel for rel, st in chroot_prune.walk(root)
                 if (root / rel).is_file() and not (root / rel).is_symlink()
                 and chroot_prune.is_elf(root / rel)]  # fmt: skip
        _, missing = chroot_prune.ldd(root, elves)
        _, missing_there = chroot_prune.ldd(source, elves)
        missing = sorted(set(missing) - set(missing_there))
        if missing:
            raise BundleError("libraries missing in the pruned chroot:\n" + "\n".join(missing))
        size = sum(st.st_size for _, st in chroot_prune.walk(root))
        return version.stdout.splitlines()[0], size


def tree_bytes() -> int:
    """What the device gets besides carried folders: tracked and untracked-not-ignored."""
    names = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO,
                           capture_output=True, check=True).stdout  # fmt: skip
    total = 0
    for name in names.split(b"\0"):
        path = REPO / os.fsdecode(name)
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def build(root: Path, out: Path) -> int:
    if os.geteuid() != 0:
        raise BundleError("the bundle is cut from the pool chroot with chroot: run as root")
    if not tiers.pool_built(root):
        raise BundleError(f"no built pool chroot at {root}: {tiers.why_not('pool')}")
    started = time.monotonic()
    out.mkdir(exist_ok=True)
    paths, stale = chroot_prune.select(root)
    for rel in stale:
        print(f"traced but not in this chroot (HTCondor or Debian changed?): {rel}")
    archive = out / ARCHIVE
    write_archive(root, paths, archive)
    version, unpacked = check_unpacked(root, archive)
    wheels = fetch_wheels(out / "wheels")
    wheel_bytes = sum(w.stat().st_size for w in wheels)
    source = sum(st.st_size for rel, st in chroot_prune.walk(root))
    tree = tree_bytes()
    total = tree + archive.stat().st_size + wheel_bytes
    mib = 2**20
    lines = [
        f"built {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} from {root}",
        f"HTCondor: {version}",
        f"chroot: {len(paths)} entries; {source / mib:.1f} MiB before pruning, "
        f"{unpacked / mib:.1f} MiB after; {ARCHIVE} {archive.stat().st_size / mib:.1f} MiB",
        f"wheels: {len(wheels)} files, {wheel_bytes / mib:.1f} MiB",
        f"working tree: {tree / mib:.1f} MiB",
        f"total sent to the device: {total / mib:.1f} MiB of {CARRY_LIMIT / mib:.0f} MiB",
        f"build took {time.monotonic() - started:.0f} s",
    ]
    (out / "MANIFEST.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if total > CARRY_LIMIT:
        raise BundleError(f"{total / mib:.1f} MiB exceed the device's {CARRY_LIMIT / mib} MiB")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verb", choices=("build", "trace-start", "trace-collect"))
    parser.add_argument("--root", type=Path, default=tiers.pool_root(),
                        help="the pool chroot (tiers.pool_root(): EXECD_POOL_ROOT)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT, help="the bundle folder (.gpu/)")
    args = parser.parse_args(argv)
    try:
        if args.verb == "build":
            return build(args.root.resolve(), args.out)
        if args.verb == "trace-start":
            count = chroot_prune.trace_start(args.root.resolve())
            print(f"{count} files marked; run the pool tier on {args.root}, then trace-collect")
            return 0
        read = chroot_prune.trace_collect(args.root.resolve())
        header = ("# Files of the pool chroot that a run of the pool tier read (HTCondor "
                  "25.14.1, Debian sid),\n# by tests/gpu/bundle.py trace-start/-collect; "
                  "chroot_prune.py keeps them.\n")  # fmt: skip
        chroot_prune.TRACED.write_text(header + "".join(f"/{r}\n" for r in read))
        print(f"{len(read)} files read since trace-start -> {chroot_prune.TRACED}")
        return 0
    except (BundleError, chroot_prune.PruneError, subprocess.CalledProcessError) as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
