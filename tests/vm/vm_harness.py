"""Boot the VM tier's guest once and run the guest tests inside it.

The guest is a stock Debian kernel under QEMU (software emulation, never KVM: this host's
/dev/kvm cannot boot stock kernels), started by virtme-ng with the host's root filesystem
shared read-only, so the checkout and its virtualenv are visible at the same paths. The
only writable host directory is the results directory (`--rwdir`): the guest's pytest
writes its JUnit XML, its own output and its exit status there, and the console log of
the whole boot lands there too, so a failure can be read after the fact.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import tiers  # tests/conftest.py puts tests/ on sys.path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent

GUEST_TESTS = Path(__file__).resolve().parent / "guest"
# Whole-VM budget: boot is ~20 s, Python ~10x slower than the host; the tier must stay
# well inside CI's time on 2 cores. The pool tests (guest/test_pool_oom.py) take ~90 s
# of it per pool start and job.
BOOT_TIMEOUT_S = 600
GUEST_MEMORY = "2G"
GUEST_CPUS = "2"
# The directory holding the pool tier's chroot, read-only in the guest (guest_pool.py
# lays a writable overlay over it there): not at its host path, because virtme-ng hides
# the host's /var/cache (where it lives as root) under a tmpfs.
POOL_GUEST_PATH = "/tmp/execd-vm-pool-chroots"


@dataclass(frozen=True)
class GuestCase:
    """One guest test's outcome, from the guest's JUnit XML."""

    nodeid: str
    outcome: str  # passed, failed, error, skipped
    detail: str


@dataclass
class GuestRun:
    """What one boot produced: the per-test outcomes and where to look when it went wrong."""

    results_dir: Path
    timed_out: bool = False
    exit_status: int | None = None
    cases: dict[str, GuestCase] = field(default_factory=dict)

    @property
    def console_log(self) -> Path:
        return self.results_dir / "console.log"

    @property
    def pytest_log(self) -> Path:
        return self.results_dir / "guest-pytest.log"

    def diagnosis(self, lines: int = 60) -> str:
        """The tails of the guest's pytest output and of the VM console, for a failure."""
        parts = []
        for log in (self.pytest_log, self.console_log):
            text = log.read_text(errors="replace") if log.exists() else "(not written)\n"
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- last {lines} lines of {log} ---\n{tail}")
        return "\n".join(parts)


def pool_env() -> dict[str, str]:
    """What the guest's pool tests (guest/guest_pool.py) need to know from the host:
    the VM tier's own copy of the pool chroot (tiers.vm_pool_root)."""
    root = tiers.vm_pool_root()
    if tiers.pool_built(root):
        return {"EXECD_VM_POOL_CHROOT": f"{POOL_GUEST_PATH}/{root.name}"}
    return {"EXECD_VM_POOL_WHY_NOT": tiers.why_not("pool") or
            f"no copy of the pool chroot at {root}; run `python tests/tiers.py setup`"}


def pool_dirs() -> list[str]:
    """vng's option sharing the directory that holds the pool chroot (read-only)."""
    root = tiers.vm_pool_root()
    return [f"--rodir={POOL_GUEST_PATH}={root.parent}"] if tiers.pool_built(root) else []


def guest_script(results: Path) -> str:
    """The shell command the guest runs: pytest on the guest tests, status to a file."""
    env = {
        "EXECD_IN_VM": "1",
        "PYTHONPATH": str(REPO),
        # The checkout is read-only in the guest: nothing may try to write into it.
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/tmp",
        # Guest tests may leave diagnostics (daemon logs) beside the guest's pytest output.
        "EXECD_VM_RESULTS": str(results),
        **pool_env(),
    }
    pytest = [
        sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider",
        "-p", "no:hypothesispytest", "--rootdir", str(REPO),
        f"--junitxml={results / 'guest.xml'}", str(GUEST_TESTS),
    ]  # fmt: skip
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        f"cd {shlex.quote(str(REPO))} && export {exports} && "
        f"{shlex.join(pytest)} > {shlex.quote(str(results / 'guest-pytest.log'))} 2>&1; "
        f"echo $? > {shlex.quote(str(results / 'guest-exit'))}"
    )


def boot_and_run(results: Path, timeout_s: float = BOOT_TIMEOUT_S) -> GuestRun:
    """Boot the guest once, run every guest test inside, and collect the outcomes."""
    kernel = tiers.vm_kernel()
    vng = tiers.vng_command()
    if kernel is None or vng is None:
        raise RuntimeError(f"the vm tier cannot run: {tiers.why_not('vm')}")
    results.mkdir(parents=True, exist_ok=True)
    argv = [
        str(vng), "--verbose", "--disable-kvm", "--run", str(kernel),
        "--memory", GUEST_MEMORY, "--cpus", GUEST_CPUS, f"--rwdir={results}",
        "--user", "root",  # the guest tests own the guest's cgroup tree
        *pool_dirs(),
        "--", guest_script(results),
    ]  # fmt: skip
    # vng runs its helpers (virtme-run) from PATH: put this interpreter's bin first.
    env = {**os.environ, "PATH": f"{vng.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    run = GuestRun(results)
    with (results / "console.log").open("wb") as console:
        vm = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            cwd=results,
            env=env,
            start_new_session=True,
        )
        try:
            vm.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            run.timed_out = True
            os.killpg(vm.pid, signal.SIGKILL)  # vng and the qemu it started
            vm.wait()
    status = results / "guest-exit"
    if status.exists() and status.read_text().strip().isdigit():
        run.exit_status = int(status.read_text())
    junit = results / "guest.xml"
    if junit.exists():
        run.cases = parse_junit(junit)
    return run


def parse_junit(path: Path) -> dict[str, GuestCase]:
    """Guest outcomes keyed by `<file stem>::<test name>` (parametrized ids included)."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        nodeid = f"{module}::{case.get('name', '')}"
        outcome, detail = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
                detail = (child.get("message") or "") + "\n" + (child.text or "")
                break
        cases[nodeid] = GuestCase(nodeid, outcome, detail.strip())
    return cases


def guest_test_functions() -> list[str]:
    """`<file stem>::<function>` for every guest test, found without importing them.

    The host reports each guest test by name, so it must know the names before the guest
    has run; reading the files' syntax needs none of the guest-only imports. Guest tests
    are therefore module-level functions (parametrized ones included), not classes; a
    guest result the host cannot name fails test_guest_session_completed.
    """
    import ast

    names = []
    for path in sorted(GUEST_TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:
            is_function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            if is_function and node.name.startswith("test"):
                names.append(f"{path.stem}::{node.name}")
    return names
