"""Boot real systemd as PID 1 in the VM once and drive the real `execd run` under it.

The service is the project's unit file, systemd/execd.service, as installed from the
checkout: `/usr/bin/execd` becomes the checkout's venv `execd` (in ExecStart= and
ExecStopPost=), a drop-in points CONDOR_CONFIG at a config in the results directory and
shortens the watchdog and restart delays. Everything else (Type=notify, Delegate=,
DelegateSubgroup=, KillMode=, ExecReload=, Restart=) is the unit's own.

virtme-ng's `--systemd` boots the guest with /sbin/init (systemd) and runs the command
given to vng from its override of serial-getty@ttyS0.service (virtme-ng's guest init,
which also mounts the `--rwdir` results directory), i.e. as root under that systemd. Our
command, systemd_guest/drive_service.py, installs the generated units under
/run/systemd/system, runs systemctl, and writes what it saw to the results directory;
virtme-ng's init powers the guest off when it returns.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import tiers  # tests/conftest.py puts tests/ on sys.path

REPO = Path(__file__).resolve().parent.parent.parent
UNIT_FILE = REPO / "systemd" / "execd.service"
GUEST_DIR = Path(__file__).resolve().parent / "systemd_guest"
TEST_UNIT = "execd.service"
INSTALLED_EXECD = "/usr/bin/execd"
# Outside /tmp: the guest mounts a fresh tmpfs on /tmp (GUEST_FSTAB), which would hide a
# results directory there. Kept after the run (git-ignored) for reading a failure.
RESULTS_DIR = tiers.VM_CACHE / "systemd-run"
# Boot (~130 s of the guest's clock) plus the real daemon started three times, a job,
# two reloads and a watchdog restart under software emulation; the guest's driver
# records each step as it goes, so a run cut short still says how far it got.
BOOT_TIMEOUT_S = 1200 if not REPO.resolve().is_relative_to("/tmp") else 2200
GUEST_MEMORY = "1G"
GUEST_CPUS = "2"
# The drop-in's delays: short enough for the test, long enough for an emulated guest.
# systemd's watchdog runs from the main process's exec, and execd's first WATCHDOG=1 comes
# once it serves (imports, detection, cgroup setup: several seconds under emulation).
# TimeoutAbortSec: how long the watchdog's SIGABRT may take before SIGKILL (measured:
# systemd follows it with SIGCONT, and the SIGSTOPped daemon died of it within 1 s).
# `container=` (empty): this host's root has /.dockerenv, from which systemd as PID 1
# concludes it runs in a Docker container and then starts a console-getty instead of
# the serial-getty@ttyS0 that virtme-ng hooks to run our command; an empty `container`
# in PID 1's environment (the kernel passes unknown `k=v` arguments to init) means
# "no container" and wins over the file.
#
# systemd's generators are not PID 1 and still see /.dockerenv, so the getty generator
# never creates serial-getty@ttyS0 (a "login:" prompt from console-getty was all) and
# kernel-command-line options handled by generators (systemd.run=, systemd.mask=) are
# ignored. `systemd.unit=` is read by PID 1 itself: it makes virtme-ng's hooked getty
# the boot's only goal, which also skips everything a multi-user boot would start.
KERNEL_ARGS = ("--append=container=", "--append=systemd.unit=serial-getty@ttyS0.service")
# virtme-ng bind-mounts its configured fstab over the guest's /etc/fstab before systemd
# starts. A tmpfs /tmp there matters: without it systemd-tmpfiles-setup (`D /tmp` with
# --remove) tries to empty the host's read-only /tmp over 9p, file by file, for minutes.
# But a checkout that itself lives under /tmp would vanish under that tmpfs (the guest
# reads the repo and its .venv from the host): then /tmp is left alone and the boot is
# given the time the slow cleanup takes.
REPO_UNDER_TMP = REPO.resolve().is_relative_to("/tmp")
GUEST_FSTAB = "" if REPO_UNDER_TMP else "tmpfs /tmp tmpfs mode=1777,nosuid,nodev 0 0\n"
TEST_DROPIN = """\
[Service]
WatchdogSec=30s
TimeoutAbortSec=5s
RestartSec=1s
TimeoutStartSec=300s
TimeoutStopSec=120s
"""


@dataclass
class SystemdRun:
    results_dir: Path
    timed_out: bool = False
    observed: dict[str, object] = field(default_factory=dict)

    @property
    def console_log(self) -> Path:
        return self.results_dir / "console.log"

    def diagnosis(self, lines: int = 60) -> str:
        text = self.console_log.read_text(errors="replace") if self.console_log.exists() else ""
        tail = "\n".join(text.splitlines()[-lines:])
        journal = str(self.observed.get("journal", "(no journal recorded)"))
        error = str(self.observed.get("error", ""))
        return f"{error}\n--- journal of {TEST_UNIT} ---\n{journal}\n--- console tail ---\n{tail}"


def venv_execd() -> Path:
    """The checkout's `execd` console script (in the venv running the tests)."""
    return Path(sys.executable).parent / "execd"


def test_unit_text(execd: str) -> str:
    """execd.service as installed from the checkout: its `execd` is EXECD, nothing else."""
    text = UNIT_FILE.read_text()
    if f"ExecStart={INSTALLED_EXECD} run" not in text.splitlines():
        raise ValueError(f"{UNIT_FILE} has no 'ExecStart={INSTALLED_EXECD} run' line")
    return text.replace(INSTALLED_EXECD, execd)


def write_units(results: Path) -> None:
    units = results / "units"
    (units / f"{TEST_UNIT}.d").mkdir(parents=True, exist_ok=True)
    (units / TEST_UNIT).write_text(test_unit_text(str(venv_execd())))
    (units / f"{TEST_UNIT}.d" / "test.conf").write_text(TEST_DROPIN)
    env = (f'[Service]\nEnvironment="CONDOR_CONFIG={results / "execd_config"}" '
           "PYTHONDONTWRITEBYTECODE=1\n")
    (units / f"{TEST_UNIT}.d" / "env.conf").write_text(env)


def fresh_results_dir() -> Path:
    shutil.rmtree(RESULTS_DIR, ignore_errors=True)
    RESULTS_DIR.mkdir(parents=True)
    return RESULTS_DIR


def vng_home(results: Path) -> Path:
    """A HOME for vng whose virtme-ng.conf names GUEST_FSTAB (vng has no flag for it)."""
    home = results / "vng-home"
    conf_dir = home / ".config" / "virtme-ng"
    conf_dir.mkdir(parents=True, exist_ok=True)
    fstab = results / "fstab"
    fstab.write_text(GUEST_FSTAB)
    conf = {"systemd": {"masks": ["getty@"], "fstab": str(fstab)}}
    (conf_dir / "virtme-ng.conf").write_text(json.dumps(conf))
    return home


def boot_and_drive(results: Path, timeout_s: float = BOOT_TIMEOUT_S) -> SystemdRun:
    kernel = tiers.vm_kernel()
    vng = tiers.vng_command()
    if kernel is None or vng is None:
        raise RuntimeError(f"the vm tier cannot run: {tiers.why_not('vm')}")
    results.mkdir(parents=True, exist_ok=True)
    write_units(results)
    driver = [sys.executable, str(GUEST_DIR / "drive_service.py"), str(results), TEST_UNIT,
              str(venv_execd())]
    script = f"cd / && PYTHONPATH={shlex.quote(str(REPO))} {shlex.join(driver)}"
    argv = [
        str(vng), "--verbose", "--disable-kvm", "--systemd", "--run", str(kernel),
        "--memory", GUEST_MEMORY, "--cpus", GUEST_CPUS, f"--rwdir={results}",
        "--user", "root", *KERNEL_ARGS, "--", script,
    ]  # fmt: skip
    env = {
        **os.environ,
        "PATH": f"{vng.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(vng_home(results)),
    }
    run = SystemdRun(results)
    with run.console_log.open("wb") as console:
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
        finally:  # also when pytest is interrupted: never leave a qemu behind
            if vm.poll() is None:
                os.killpg(vm.pid, signal.SIGKILL)  # vng and the qemu it started
                vm.wait()
    observed = results / "observed.json"
    if observed.exists():
        run.observed = json.loads(observed.read_text())
    return run
