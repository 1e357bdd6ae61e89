"""Boot real systemd as PID 1 in the VM once and drive a Type=notify service under it.

The service is the project's real unit file, systemd/execd.service, with only ExecStart
replaced (by a stand-in that speaks the notify protocol the way `execd run` must) and a
test drop-in that shortens the watchdog and restart delays, so the unit's own Type=,
Delegate=, DelegateSubgroup=, KillMode=, ExecReload= and Restart= are what is exercised.

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
TEST_UNIT = "execd-standin.service"
# Outside /tmp: the guest mounts a fresh tmpfs on /tmp (GUEST_FSTAB), which would hide a
# results directory there. Kept after the run (git-ignored) for reading a failure.
RESULTS_DIR = tiers.VM_CACHE / "systemd-run"
# Measured on 2 cores: ~220 s idle, ~270 s with the machine's load average at 7.
BOOT_TIMEOUT_S = 480 if not REPO.resolve().is_relative_to("/tmp") else 1500
GUEST_MEMORY = "1G"
GUEST_CPUS = "2"
# The drop-in's delays: short enough for the test, long enough for an emulated guest
# where Python starts in ~1 s. WatchdogSec must exceed the stand-in's start-up work
# (the first ping comes from a thread started before READY=1).
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
WatchdogSec=6s
RestartSec=1s
TimeoutStopSec=30s
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


def test_unit_text(exec_start: str) -> str:
    """execd.service with only ExecStart= replaced; every other directive kept as is."""
    lines = []
    replaced = 0
    for line in UNIT_FILE.read_text().splitlines():
        if line.strip().startswith("ExecStart="):
            lines.append(f"ExecStart={exec_start}")
            replaced += 1
        else:
            lines.append(line)
    if replaced != 1:
        raise ValueError(f"{UNIT_FILE} has {replaced} ExecStart= lines, expected 1")
    return "\n".join(lines) + "\n"


def write_units(results: Path) -> None:
    standin = GUEST_DIR / "standin_service.py"
    exec_start = shlex.join(
        [sys.executable, str(standin), str(results / "events.jsonl"), str(results / "service.conf")]
    )
    units = results / "units"
    (units / f"{TEST_UNIT}.d").mkdir(parents=True, exist_ok=True)
    (units / TEST_UNIT).write_text(test_unit_text(exec_start))
    (units / f"{TEST_UNIT}.d" / "test.conf").write_text(TEST_DROPIN)
    # The stand-in imports execd from the read-only checkout.
    env = f'[Service]\nEnvironment="PYTHONPATH={REPO}" PYTHONDONTWRITEBYTECODE=1\n'
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
    driver = [sys.executable, str(GUEST_DIR / "drive_service.py"), str(results), TEST_UNIT]
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
