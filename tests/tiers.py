"""Test tiers: what each needs, whether it can run here, and installing what it needs.

Tiers (DESIGN.md): unit (pure), component (fake OS seam), system (real processes and the
real cgroup v2 hierarchy of this machine), vm (a real cgroup v2 kernel under QEMU),
pool (a real HTCondor pool in a chroot). Each tier is a directory under tests/.

`python tests/tiers.py setup` installs what the tiers need (as root, from the distro's
packages); `python tests/tiers.py check` prints whether each tier can run and why not.
Under EXECD_REQUIRE_ALL_TIERS=1 (CI) a tier that cannot run fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

TIERS = ("unit", "component", "system", "vm", "pool")
REPO = Path(__file__).resolve().parent.parent
# Downloads and extracted kernels live in the checkout (git-ignored) so that a second
# `setup` neither re-downloads nor needs the network.
VM_CACHE = REPO / ".cache" / "vm"
VM_KERNEL_ROOT = VM_CACHE / "kernel"
VM_DEBS = VM_CACHE / "debs"
# qemu runs the guest, busybox-static is the guest's initramfs userland (virtme-ng),
# kmod's depmod indexes the extracted kernel's modules (and virtme-ng's modprobe resolves
# them), `file` tells virtme-ng the kernel image's version.
VM_APT_PACKAGES = ("qemu-system-x86", "busybox-static", "kmod", "file")
# systemd is the guest's PID 1 for the service tests (tests/vm/test_systemd_service.py):
# `vng --systemd` boots the host's own /sbin/init; udev makes the guest's dev-ttyS0.device
# on which virtme-ng's serial getty (the one that runs our command) depends. Installing
# them starts nothing where systemd is not PID 1 (a container's policy-rc.d refuses it).
VM_SYSTEMD_PACKAGES = ("systemd", "systemd-sysv", "udev")
SYSTEMD_BINARY = Path("/lib/systemd/systemd")
UDEVD_BINARY = Path("/lib/systemd/systemd-udevd")
# `vng --systemd` mounts a tmpfs over /lib/modules in the guest; the mount point must
# exist on the host's (shared, read-only) root, and a container image may lack it.
HOST_MODULES_DIR = Path("/lib/modules")
VM_KERNEL_META = "linux-image-amd64"
# The pool tier's Debian sid chroot with HTCondor (not packaged for bookworm). As root it
# is cached outside the checkout, so CI's fresh clones on the same machine reuse it; the
# stamp beside it is written only once the build completed (a half-built chroot has none
# and is rebuilt). EXECD_POOL_ROOT overrides the place.
POOL_SUITE = "sid"
POOL_WORKERS = 2  # pool_workers()
# What a copy of the chroot for another worker leaves out: mount points (made empty) and
# the pool's local directory (the harness makes it afresh).
POOL_COPY_MOUNTS = ("proc", "sys", "dev", "run", "tmp")
POOL_COPY_SKIPPED = ("var/lib/execd-pool",)
POOL_DEFAULT_MIRROR = "http://deb.debian.org/debian"
POOL_CONDOR_PACKAGE = "condor"
# condor_ssh_to_job's client (tests/pool/test_pool_ssh_to_job.py); condor pulls the server.
POOL_EXTRA_PACKAGES = ("openssh-client",)
# The container-image test's base (tests/system/test_container_image.py): a bookworm
# rootfs with the image's Python already in it, so that building the Dockerfile needs
# neither a registry nor apt. Cached and stamped like the pool chroot.
IMAGE_BASE_SUITE = "bookworm"
IMAGE_BASE_INCLUDE = ("python3", "python3-venv")
IMAGE_APT_PACKAGES = ("buildah", "debootstrap")


def _always() -> str | None:
    return None


def cgroup2_root() -> Path | None:
    """The writable cgroup v2 mount of this machine, if any."""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            mount = Path(fields[1])
            if os.access(mount, os.W_OK):
                return mount
    return None


def _system() -> str | None:
    if sys.platform != "linux":
        return "the system tier needs Linux"
    if os.geteuid() != 0:
        return "the system tier needs root (it creates cgroups and runs jobs as other users)"
    if cgroup2_root() is None:
        return "no writable cgroup v2 hierarchy is mounted"
    try:
        import pwd

        pwd.getpwnam("nobody")
    except KeyError:
        return "the system tier runs jobs as `nobody`, and this machine has no such user"
    if not Path("/usr/bin/python3").exists():
        return "the system tier's memory-policy job needs /usr/bin/python3"
    return None


def vm_kernel() -> Path | None:
    """The stock kernel image the VM tier boots, extracted under .cache/vm/kernel."""
    images = sorted((VM_KERNEL_ROOT / "boot").glob("vmlinuz-*"))
    for image in reversed(images):
        version = image.name.removeprefix("vmlinuz-")
        if (VM_KERNEL_ROOT / "lib" / "modules" / version / "modules.dep").exists():
            return image
    return None


def vng_command() -> Path | None:
    """virtme-ng's `vng`, preferring the one installed next to this interpreter."""
    beside = Path(sys.executable).parent / "vng"
    if beside.exists():
        return beside
    found = shutil.which("vng")
    return Path(found) if found else None


def in_vm_guest() -> bool:
    """True inside the VM tier's guest, where the tier's tests run on the guest kernel."""
    return os.environ.get("EXECD_IN_VM", "") == "1"


def _vm() -> str | None:
    if in_vm_guest():
        controllers = Path("/sys/fs/cgroup/cgroup.controllers")
        have = controllers.read_text().split() if controllers.exists() else []
        lacking = [c for c in ("memory", "cpu", "pids") if c not in have]
        return f"the guest's cgroup v2 root lacks {lacking}" if lacking else None
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return "the vm tier boots an x86_64 Debian kernel and needs an x86_64 Linux host"
    missing = []
    if shutil.which("qemu-system-x86_64") is None:
        missing.append("qemu-system-x86_64 (apt package qemu-system-x86)")
    if not any(shutil.which(b) for b in ("busybox-static", "busybox")):
        missing.append("busybox (apt package busybox-static)")
    for tool, package in (("modprobe", "kmod"), ("file", "file")):
        if shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") is None:
            missing.append(f"{tool} (apt package {package})")
    if vng_command() is None:
        missing.append("vng (PyPI package virtme-ng, in the test extras)")
    if vm_kernel() is None:
        missing.append(f"a kernel image with indexed modules under {VM_KERNEL_ROOT}")
    if not SYSTEMD_BINARY.exists() or not Path("/sbin/init").exists():
        missing.append("systemd as /sbin/init (apt packages systemd, systemd-sysv)")
    if not UDEVD_BINARY.exists():
        missing.append("systemd-udevd (apt package udev)")
    if not HOST_MODULES_DIR.is_dir():
        missing.append(f"the directory {HOST_MODULES_DIR} (a mount point for the guest)")
    if missing:
        return "missing " + ", ".join(missing) + "; run `python tests/tiers.py setup` as root"
    return None


def pool_root(worker: int | None = None) -> Path:
    """Where the pool tier's chroot lives (built or not): `worker`'s, by default this
    process's (pytest-xdist's PYTEST_XDIST_WORKER, gwN: `make test` runs the pool tier
    on pool_workers() chroots at once, one pool each). Worker 0's is the one debootstrap
    builds; worker N's is a copy of it beside it, named `<name>.N` (setup makes it)."""
    override = os.environ.get("EXECD_POOL_ROOT", "")
    root = Path(override) if override else cache_root("pool-sid")
    n = xdist_worker() if worker is None else worker
    return root if n == 0 else root.with_name(f"{root.name}.{n}")


def vm_pool_root() -> Path:
    """The copy of the pool chroot the VM tier's guest runs its pool from (read-only,
    under an overlay): its own, as the pool tier's pools write into theirs meanwhile
    (`make test` runs the tiers at once; an overlay's lower layer must not change)."""
    root = pool_root(0)
    return root.with_name(f"{root.name}.vm")


def pool_copies() -> list[Path]:
    """The copies of the pool chroot setup makes: one per extra pool worker, the VM's."""
    return [*(pool_root(n) for n in range(1, pool_workers())), vm_pool_root()]


def xdist_worker() -> int:
    """This pytest-xdist worker's number (gwN); 0 outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def pool_workers() -> int:
    """How many chroots the pool tier runs on at once (EXECD_POOL_WORKERS, default 2:
    its tests mostly wait on HTCondor's timers)."""
    value = os.environ.get("EXECD_POOL_WORKERS", "")
    return max(1, int(value)) if value.isdigit() else POOL_WORKERS


def cache_root(name: str) -> Path:
    """Where a cached rootfs lives: outside the checkout as root, so fresh clones reuse it."""
    if os.geteuid() == 0:
        return Path("/var/cache/execd-tests") / name
    return REPO / ".cache" / "pool" / name


def built_stamp(root: Path) -> Path:
    """Written beside a cached rootfs only once its build completed."""
    return root.with_name(root.name + ".built")


def pool_stamp(root: Path | None = None) -> Path:
    return built_stamp(root or pool_root())


def image_base_root() -> Path:
    """The bookworm rootfs the container-image test builds FROM (built or not)."""
    return Path(os.environ.get("EXECD_IMAGE_BASE", "") or cache_root("image-bookworm"))


def image_base_built(root: Path | None = None) -> bool:
    root = root or image_base_root()
    ensurepip = root / "usr" / "lib" / "python3.11" / "ensurepip"  # from python3-venv
    return built_stamp(root).exists() and ensurepip.is_dir()


def pool_built(root: Path | None = None) -> bool:
    """True when the chroot's build completed and its HTCondor is still in place."""
    root = root or pool_root()
    return pool_stamp(root).exists() and (root / "usr" / "sbin" / "condor_master").exists()


def _pool() -> str | None:
    if sys.platform != "linux":
        return "the pool tier needs Linux"
    if os.geteuid() != 0:
        return "the pool tier needs root (it chroots and mounts /proc, /sys, /dev, /run)"
    missing = []
    sbin = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    root = pool_root()
    built = pool_built(root)
    # debootstrap only builds the chroot: a machine given a built one (the GPU bundle,
    # tests/gpu/) runs the tier without it.
    tools = (("chroot", "coreutils"), ("mount", "mount"), ("umount", "mount"), ("gcc", "gcc"))
    if not built:
        tools = (("debootstrap", "debootstrap"), *tools)
    for tool, package in tools:
        if shutil.which(tool, path=sbin) is None:
            missing.append(f"{tool} (apt package {package})")
    if not built:
        missing.append(
            f"the HTCondor chroot at {root} (no completed build: {pool_stamp(root)} absent)"
        )
    if missing:
        return "missing " + ", ".join(missing) + "; run `python tests/tiers.py setup` as root"
    return None


CHECKS: dict[str, Callable[[], str | None]] = {
    "unit": _always,
    "component": _always,
    "system": _system,
    "vm": _vm,
    "pool": _pool,
}


def why_not(tier: str) -> str | None:
    """None when the tier can run here, else the reason it cannot."""
    return CHECKS[tier]()


def require_all() -> bool:
    return os.environ.get("EXECD_REQUIRE_ALL_TIERS", "") not in ("", "0")


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    print("+", " ".join(str(a) for a in argv), flush=True)
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, check=True, stdout=subprocess.PIPE, text=True
    )
    return done.stdout


def _apt_installed(package: str) -> bool:
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        check=False,
    )
    return done.stdout.strip() == "install ok installed"


class _Apt:
    """apt-get with at most one `update` per setup run, and only when it is needed."""

    def __init__(self) -> None:
        self.updated = False
        self.env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def update(self) -> None:
        if not self.updated:
            _run("apt-get", "update", "-q")
            self.updated = True

    def install(self, packages: tuple[str, ...]) -> None:
        wanted = [p for p in packages if not _apt_installed(p)]
        if wanted:
            self.update()
            print("+ apt-get install -y", *wanted, flush=True)
            subprocess.run(["apt-get", "install", "-y", "-q", *wanted], env=self.env, check=True)

    def kernel_package(self) -> str:
        """The linux-image-<ver>-amd64 package the distro's metapackage depends on."""
        for attempt in (1, 2):
            done = subprocess.run(
                ["apt-cache", "depends", VM_KERNEL_META],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                check=False,
            )
            for line in done.stdout.splitlines():
                dep = line.strip().removeprefix("Depends:").strip()
                if line.strip().startswith("Depends:") and dep.startswith("linux-image-"):
                    return dep
            if attempt == 1:
                self.update()
        raise RuntimeError(f"apt-cache knows no kernel behind {VM_KERNEL_META}")


def _setup_vm(apt: _Apt) -> None:
    apt.install(VM_APT_PACKAGES + VM_SYSTEMD_PACKAGES)
    HOST_MODULES_DIR.mkdir(parents=True, exist_ok=True)
    if vm_kernel() is not None:
        return
    debs = sorted(VM_DEBS.glob("linux-image-*.deb"))
    if not debs:
        VM_DEBS.mkdir(parents=True, exist_ok=True)
        package = apt.kernel_package()
        try:
            _run("apt-get", "download", package, cwd=VM_DEBS)
        except subprocess.CalledProcessError:
            apt.update()
            _run("apt-get", "download", package, cwd=VM_DEBS)
        debs = sorted(VM_DEBS.glob("linux-image-*.deb"))
    # Extracted, not installed: the host's own boot setup stays untouched, and virtme-ng
    # finds the modules beside the image (<root>/boot/vmlinuz-V and <root>/lib/modules/V).
    shutil.rmtree(VM_KERNEL_ROOT, ignore_errors=True)
    _run("dpkg-deb", "-x", debs[-1], VM_KERNEL_ROOT)
    for moddir in (VM_KERNEL_ROOT / "lib" / "modules").iterdir():
        _run("depmod", "-a", "-b", VM_KERNEL_ROOT, moddir.name)
    if vm_kernel() is None:
        raise RuntimeError(f"no usable kernel image under {VM_KERNEL_ROOT} after extraction")


def debian_mirror() -> str:
    """The host's Debian mirror (deb822 sources first, then sources.list)."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:"):
                for uri in line.split()[1:]:
                    if "security" not in uri:
                        return uri
    legacy = Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and "security" not in fields[1]:
                return fields[1]
    return POOL_DEFAULT_MIRROR


def mounts_under(root: Path) -> list[Path]:
    """Mount points at or below root, deepest first (the order to unmount them)."""
    found = []
    prefix = str(root.resolve())
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_all(root: Path) -> None:
    """Unmount everything below root; lazily where a plain unmount is refused."""
    for point in mounts_under(root):
        done = subprocess.run(["umount", str(point)], stderr=subprocess.DEVNULL, check=False)
        if done.returncode != 0:
            subprocess.run(["umount", "-l", str(point)], check=False)


def _build_rootfs(
    root: Path, suite: str, include: tuple[str, ...], finish: Callable[[Path], str]
) -> None:
    """debootstrap suite into root unless a completed build is there; finish(root)
    completes it and returns the line written into the stamp."""
    stamp = built_stamp(root)
    if stamp.exists():
        print(f"{root} already built ({stamp.read_text().strip()})")
        return
    # A half-built chroot: never delete through a bind mount of the host's /dev or /sys.
    unmount_all(root)
    if root.exists():
        _run("rm", "-rf", "--one-file-system", root)
    root.parent.mkdir(parents=True, exist_ok=True)
    extra = [f"--include={','.join(include)}"] if include else []
    _run("debootstrap", "--variant=minbase", *extra, suite, root, debian_mirror())
    line = finish(root)
    stamp.write_text(line + "\n")
    print(f"{root} built: {line}")


def _finish_pool(root: Path) -> str:
    # Packages' maintainer scripts must not start services (ssh, condor) in the chroot.
    policy = root / "usr" / "sbin" / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    env = ["env", "DEBIAN_FRONTEND=noninteractive"]
    # Maintainer scripts (cryptsetup's, pulled in by condor) fail without /proc.
    _run("mount", "-t", "proc", "proc", root / "proc")
    try:
        # sid's Release files may be older than their Valid-Until on a snapshot mirror.
        _run("chroot", root, *env, "apt-get", "-o", "Acquire::Check-Valid-Until=false", "update")
        _run("chroot", root, *env, "apt-get", "-f", "install", "-y", "-q")
        _run("chroot", root, *env, "apt-get", "install", "-y", "-q", POOL_CONDOR_PACKAGE,
             *POOL_EXTRA_PACKAGES)
        _run("chroot", root, *env, "apt-get", "clean")
        return _run("chroot", root, "condor_version").splitlines()[0]
    finally:
        unmount_all(root)


@contextlib.contextmanager
def _pool_locked(root: Path) -> Iterator[None]:
    """The lock a pool run in `root` takes (pool_harness.Pool._lock): none runs there
    meanwhile."""
    fd = os.open(root.with_name(root.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _add_pool_packages(root: Path) -> None:
    """POOL_EXTRA_PACKAGES into a chroot built before they were listed (its copies
    follow: the stamp is touched)."""
    with _pool_locked(root):
        env = ["env", "DEBIAN_FRONTEND=noninteractive"]
        _run("mount", "-t", "proc", "proc", root / "proc")
        try:
            # As _finish_pool: the lists may be gone (apt-get clean) or past Valid-Until.
            _run("chroot", root, *env, "apt-get", "-o", "Acquire::Check-Valid-Until=false",
                 "update")  # fmt: skip
            _run("chroot", root, *env, "apt-get", "install", "-y", "-q", *POOL_EXTRA_PACKAGES)
            _run("chroot", root, *env, "apt-get", "clean")
        finally:
            unmount_all(root)
        pool_stamp(root).touch()


def _setup_pool(apt: _Apt) -> None:
    # gcc: test_pool_ssh_to_job builds the libgetpwnam.so Debian does not ship.
    apt.install(("debootstrap", "gcc"))
    root = pool_root()
    if not pool_built(root):
        built_stamp(root).unlink(missing_ok=True)
    elif not (root / "usr" / "bin" / "ssh").exists():  # built before the ssh client was
        _add_pool_packages(root)
    _build_rootfs(root, POOL_SUITE, (), _finish_pool)
    for copy in pool_copies():
        _copy_pool(root, copy)


def _copy_pool(root: Path, copy: Path) -> None:
    """The built chroot copied for another pool worker or the VM tier, unless an
    up-to-date copy is there (its stamp, copied last, is as recent as the original's)."""
    stamp, copied = pool_stamp(root), pool_stamp(copy)
    if pool_built(copy) and copied.stat().st_mtime >= stamp.stat().st_mtime:
        print(f"{copy} already copied from {root}")
        return
    with _pool_locked(root), _pool_locked(copy):
        copied.unlink(missing_ok=True)
        unmount_all(copy)  # (a killed run's mounts: never delete through them)
        if copy.exists():
            _run("rm", "-rf", "--one-file-system", copy)
        copy.mkdir(parents=True)
        skipped = [f"--exclude=./{path}" for path in (*POOL_COPY_MOUNTS, *POOL_COPY_SKIPPED)]
        print(f"+ copying {root} to {copy}", flush=True)
        subprocess.run(f"tar -C {shlex.quote(str(root))} {' '.join(skipped)} -cf - . | "
                       f"tar -C {shlex.quote(str(copy))} -xpf -", shell=True, check=True)
        for mount in POOL_COPY_MOUNTS:
            (copy / mount).mkdir(exist_ok=True)
        (copy / "tmp").chmod(0o1777)
        shutil.copy2(stamp, copied)


def _finish_image_base(root: Path) -> str:
    _run("chroot", root, "apt-get", "clean")
    return _run("chroot", root, "python3", "--version").strip()


def _setup_image(apt: _Apt) -> None:
    apt.install(IMAGE_APT_PACKAGES)
    root = image_base_root()
    if not image_base_built(root):
        built_stamp(root).unlink(missing_ok=True)
    _build_rootfs(root, IMAGE_BASE_SUITE, IMAGE_BASE_INCLUDE, _finish_image_base)


def setup() -> int:
    """Install what the tiers need. Each tier's installer is idempotent."""
    if sys.platform != "linux" or os.geteuid() != 0:
        print("setup installs distro packages and needs root on Linux; nothing done")
        return 1 if require_all() else 0
    apt = _Apt()
    failed = 0
    for tier, install in (("vm", _setup_vm), ("pool", _setup_pool), ("system", _setup_image)):
        try:
            install(apt)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"setup of the {tier} tier failed: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def check() -> int:
    bad = 0
    for tier in TIERS:
        reason = why_not(tier)
        print(f"{tier:10s} {'ok' if reason is None else 'cannot run: ' + reason}")
        bad += reason is not None
    return 1 if bad and require_all() else 0


if __name__ == "__main__":
    verb = sys.argv[1] if len(sys.argv) > 1 else "check"
    sys.exit({"setup": setup, "check": check}[verb]())
