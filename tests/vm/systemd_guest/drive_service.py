"""Inside the guest, under systemd as PID 1: drive the real `execd run` through its life.

Run by virtme-ng's guest shell (itself a unit under the guest's systemd). It installs
the units the host generated (RESULTS/units: the project's systemd/execd.service as
installed from the checkout, plus a test drop-in) into /run/systemd/system, then:
start, a job's cgroup, reload (a good config, then a bad one), stop with a job running,
start again and SIGSTOP the daemon (the watchdog must kill and restart it), and stop.
What systemctl, the execd CLI and the kernel said at each step goes to
RESULTS/observed.json; the host-side tests judge it. This script only collects, so one
broken step does not hide the others.
Usage: drive_service.py RESULTS UNIT_NAME EXECD
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

UNIT_DIR = Path("/run/systemd/system")
CGROUP_ROOT = Path("/sys/fs/cgroup")
SYSTEMCTL_TIMEOUT_S = 240  # a start in software emulation: Python, htcondor, detection
# WatchdogSec + TimeoutAbortSec + RestartSec of the test drop-in, the ExecStopPost= and
# a new daemon's start-up, in an emulated guest.
RESTART_WAIT_S = 240
# The config the daemon starts with; BAD_LINE is where the rejected reload's error is.
CONFIG = """\
LOCAL_DIR = /tmp/execd
EXECD_LOG = -
NUM_CPUS = 2
MEMORY = 512
UPDATE_INTERVAL = 5
MAXJOBRETIREMENTTIME = 0
MachineMaxVacateTime = 3
use FEATURE : PartitionableSlot
STARTD_ATTRS = ConfigVersion
ConfigVersion = {version}
"""
BAD_LINE = 11  # appended after CONFIG's ten lines


def timed(argv: list[str], timeout: float = SYSTEMCTL_TIMEOUT_S,
          env: dict[str, str] | None = None) -> dict[str, object]:
    began = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, env=env)
    except subprocess.TimeoutExpired:
        return {"rc": None, "timed_out": True, "began": began, "ended": time.monotonic()}
    return {"rc": done.returncode, "timed_out": False, "out": done.stdout, "err": done.stderr,
            "began": began, "ended": time.monotonic()}


def systemctl(*args: str) -> dict[str, object]:
    return timed(["systemctl", *args])


def show(unit: str) -> dict[str, str]:
    props = ("ActiveState,SubState,MainPID,NRestarts,StatusText,ControlGroup,Result,"
             "Delegate,ExecMainStatus")
    done = subprocess.run(["systemctl", "show", unit, "-p", props],
                          capture_output=True, text=True, check=False)
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def journal(unit: str) -> str:
    done = subprocess.run(["journalctl", "--no-pager", "-u", unit],
                          capture_output=True, text=True, check=False)
    return done.stdout


def read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        return f"unreadable: {exc}"


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Poll: systemd has no blocking 'wait until restarted', the kernel no 'until populated'."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


class Observed(dict[str, object]):
    """What the guest saw, written to RESULTS/observed.json after every step: when the
    host's time limit cuts the run short, the steps done so far still reach the tests."""

    def __init__(self, results: Path) -> None:
        super().__init__(completed=False)
        self.path = results / "observed.json"
        self.began = time.monotonic()

    def __setitem__(self, key: str, value: object) -> None:
        super().__setitem__(key, value)
        print(f"drive_service: +{time.monotonic() - self.began:.1f}s {key}", flush=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self, indent=1, default=str))
        os.replace(tmp, self.path)


def drive(results: Path, unit: str, execd: str, observed: Observed) -> None:
    config = results / "execd_config"  # the daemon's (ExecStart= reads CONDOR_CONFIG)
    # The CLI's own config, which stays good while the daemon's is made bad: it only
    # needs to find the daemon's socket; what the daemon applied shows in its ads.
    client_config = results / "client_config"
    client_config.write_text(CONFIG.format(version=0))
    client_env = {**os.environ, "CONDOR_CONFIG": str(client_config)}

    def cli(*args: str, timeout: float = 120) -> dict[str, object]:
        return timed([execd, *args], timeout=timeout, env=client_env)

    observed["pid1"] = read(Path("/proc/1/comm"))
    observed["systemd_version"] = systemctl("--version").get("out", "")
    shutil.copytree(results / "units", UNIT_DIR, dirs_exist_ok=True)
    config.write_text(CONFIG.format(version=1))
    observed["daemon_reload"] = systemctl("daemon-reload")

    # start: returns once READY=1 came, which the daemon sends once slots are published
    observed["start"] = systemctl("start", unit)
    observed["status_right_after_start"] = cli("status", "-af", "Name", "ConfigVersion")
    observed["after_start"] = after = show(unit)
    observed["systemctl_status"] = systemctl("status", "--no-pager", "-l", unit)
    main_pid = after["MainPID"]
    observed["main_pid_cgroup"] = read(Path(f"/proc/{main_pid}/cgroup"))
    unit_cgroup = CGROUP_ROOT / after["ControlGroup"].lstrip("/")
    try:
        observed["unit_delegate_xattr"] = os.getxattr(unit_cgroup, "trusted.delegate").decode()
    except OSError as exc:
        observed["unit_delegate_xattr"] = f"unreadable: {exc}"
    observed["unit_subtree_control"] = read(unit_cgroup / "cgroup.subtree_control")

    # a job: its processes live in <unit>/<slot>.slice/job with the controllers enabled
    script = ("c=$(sed -n 's/^0:://p' /proc/self/cgroup); echo \"$c\"; id -un; "
              "cat /sys/fs/cgroup$c/../cgroup.controllers")
    observed["job"] = cli("job", "--", "sh", "-c", script)

    # reload: a good config is applied; a bad one keeps the old and names file:line
    config.write_text(CONFIG.format(version=2))
    observed["reload_good"] = systemctl("reload", unit)
    observed["status_after_reload_good"] = cli("status", "-af", "ConfigVersion")
    observed["after_reload_good"] = show(unit)
    config.write_text(CONFIG.format(version=3) + "this line is not configuration\n")
    observed["reload_bad"] = systemctl("reload", unit)
    observed["status_after_reload_bad"] = cli("status", "-af", "ConfigVersion")
    observed["after_reload_bad"] = show(unit)
    config.write_text(CONFIG.format(version=2))
    observed["journal"] = journal(unit)

    # stop with a job running: the daemon ends it (KillMode=process: systemd does not)
    client = subprocess.Popen([execd, "job", "--", "sleep", "600"], env=client_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_leaf = unit_cgroup / "slot1_1.slice" / "job"

    def job_running() -> bool:
        procs = read(job_leaf / "cgroup.procs")
        return bool(procs) and not procs.startswith("unreadable")

    observed["long_job_started"] = wait_for(job_running, 120)
    observed["long_job_pids"] = pids = read(job_leaf / "cgroup.procs").split()
    observed["status_with_job"] = show(unit)
    observed["stop"] = systemctl("stop", unit)
    observed["after_stop"] = show(unit)
    observed["long_job_pids_alive_after_stop"] = {p: Path(f"/proc/{p}").exists() for p in pids}
    observed["job_slice_exists_after_stop"] = job_leaf.parent.exists()
    observed["journal"] = journal(unit)
    try:
        out, err = client.communicate(timeout=60)
        observed["long_job_client"] = {"rc": client.returncode, "out": out, "err": err}
    except subprocess.TimeoutExpired:
        client.kill()
        observed["long_job_client"] = {"rc": None, "timed_out": True}

    # watchdog: a daemon that stops answering (SIGSTOP) is killed and restarted
    observed["start_again"] = systemctl("start", unit)
    observed["after_start_again"] = first = show(unit)
    first_pid = first["MainPID"]
    observed["hang"] = systemctl("kill", "--kill-who=main", "--signal=SIGSTOP", unit)

    def restarted() -> bool:
        now = show(unit)
        return (now.get("NRestarts", "0") not in ("", "0") and now.get("ActiveState") == "active"
                and now.get("MainPID") not in ("0", first_pid))

    def gave_up() -> bool:
        return show(unit).get("ActiveState") == "failed"

    wait_for(lambda: restarted() or gave_up(), RESTART_WAIT_S)
    observed["restarted"] = restarted()
    observed["after_restart"] = show(unit)
    observed["first_pid_gone"] = not Path(f"/proc/{first_pid}").exists()
    observed["status_after_restart"] = cli("status", "-af", "Name", "ConfigVersion")
    observed["final_stop"] = systemctl("stop", unit)
    observed["after_final_stop"] = show(unit)

    # a config that fails at startup: the start fails with the error in the journal, and
    # Restart= does not loop on it (RestartPreventExitStatus=)
    config.write_text(CONFIG.format(version=4) + "this line is not configuration\n")
    observed["start_bad"] = systemctl("start", unit)
    observed["after_start_bad"] = show(unit)
    observed["status_after_start_bad"] = systemctl("status", "--no-pager", "-l", unit)
    config.write_text(CONFIG.format(version=2))


def main() -> int:
    results, unit, execd = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    observed = Observed(results)
    try:
        drive(results, unit, execd, observed)
        observed["completed"] = True
    except Exception:  # recorded for the host to report, with the other steps' results
        observed["error"] = traceback.format_exc()
    observed["journal"] = journal(unit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
