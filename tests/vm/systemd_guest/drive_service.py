"""Inside the guest, under systemd as PID 1: drive the stand-in service through its life.

Run by virtme-ng's guest shell (which itself runs as a unit under the guest's systemd).
It installs the unit files the host generated (RESULTS/units) into /run/systemd/system,
then starts, reloads (good and bad config), hangs (watchdog restart) and stops the
service, recording what systemctl and the kernel said at each step in
RESULTS/observed.json. The host-side tests judge those observations; this script only
collects them, so one broken step does not hide the others.
Usage: drive_service.py RESULTS UNIT_NAME
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

UNIT_DIR = Path("/run/systemd/system")
SYSTEMCTL_TIMEOUT_S = 60
# The watchdog restart takes WatchdogSec + RestartSec of the test drop-in (a few s) plus
# the emulated guest's slowness.
RESTART_WAIT_S = 90


def systemctl(*args: str) -> dict[str, object]:
    began = time.monotonic()
    try:
        done = subprocess.run(
            ["systemctl", *args],
            capture_output=True,
            text=True,
            timeout=SYSTEMCTL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"rc": None, "timed_out": True, "began": began, "ended": time.monotonic()}
    return {
        "rc": done.returncode,
        "timed_out": False,
        "out": done.stdout + done.stderr,
        "began": began,
        "ended": time.monotonic(),
    }


def show(unit: str) -> dict[str, str]:
    props = "ActiveState,SubState,MainPID,NRestarts,StatusText,ControlGroup,Result,Delegate"
    done = subprocess.run(
        ["systemctl", "show", unit, "-p", props], capture_output=True, text=True, check=False
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def read_events(path: Path) -> list[dict[str, object]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def job_pids_alive(events: Path) -> dict[str, bool]:
    return {
        str(e["job_pid"]): Path(f"/proc/{e['job_pid']}").exists()
        for e in read_events(events)
        if e["event"] == "cgroups"
    }


def remove_job_cgroups(unit_cgroup: Path) -> str:
    """Remove the emptied job and daemon cgroups and the controllers enabled for them.

    systemd prunes an emptied, stopped unit's cgroup (measured on 252) and may get
    there first: what is already gone is fine.
    """
    if unit_cgroup.exists():
        for child in sorted(p for p in unit_cgroup.iterdir() if p.is_dir()):
            if child.name.startswith("job-") or child.name == "daemon":
                wait_for(lambda c=child: not _read(c / "cgroup.procs"), 10)
                with contextlib.suppress(FileNotFoundError):
                    child.rmdir()
    with contextlib.suppress(FileNotFoundError):
        (unit_cgroup / "cgroup.subtree_control").write_text("-memory -cpu -pids")
    return _read(unit_cgroup / "cgroup.subtree_control")


def wait_for(predicate: Callable[[], bool], timeout_s: float) -> bool:
    """Poll the unit's state; systemd has no blocking 'wait until restarted' call."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.25)
    return predicate()


def drive(results: Path, unit: str, observed: dict[str, object]) -> None:
    events = results / "events.jsonl"
    config = results / "service.conf"
    observed["pid1"] = Path("/proc/1/comm").read_text().strip()
    observed["systemd_version"] = systemctl("--version")["out"]
    shutil.copytree(results / "units", UNIT_DIR, dirs_exist_ok=True)
    observed["daemon_reload"] = systemctl("daemon-reload")
    config.write_text("version-1\n")

    observed["start"] = systemctl("start", unit)
    observed["after_start"] = show(unit)
    observed["status_after_start"] = systemctl("status", "--no-pager", "-l", unit)
    cgroup = Path("/sys/fs/cgroup") / observed["after_start"]["ControlGroup"].lstrip("/")
    observed["unit_cgroup_controllers"] = _read(cgroup / "cgroup.controllers")
    observed["unit_cgroup_subtree_control"] = _read(cgroup / "cgroup.subtree_control")
    main_pid = observed["after_start"]["MainPID"]
    observed["main_pid_cgroup"] = _read(Path(f"/proc/{main_pid}/cgroup"))

    config.write_text("version-2\n")
    observed["reload_good"] = systemctl("reload", unit)
    observed["after_reload_good"] = show(unit)
    config.write_text("bad\n")
    observed["reload_bad"] = systemctl("reload", unit)
    observed["after_reload_bad"] = show(unit)

    observed["stop"] = systemctl("stop", unit)
    observed["after_stop"] = show(unit)
    observed["job_pids_alive_after_stop"] = job_pids_alive(events)
    # What execd itself does on SIGTERM (vacate its jobs), so the next start finds the
    # unit's cgroup empty, as after a clean stop of the real daemon.
    for pid in observed["job_pids_alive_after_stop"]:
        os.kill(int(pid), signal.SIGKILL)
    observed["cleanup_after_stop"] = remove_job_cgroups(cgroup)

    observed["start_again"] = systemctl("start", unit)
    observed["after_start_again"] = show(unit)
    first_pid = observed["after_start_again"]["MainPID"]
    observed["hang"] = systemctl("kill", "--kill-who=main", "--signal=SIGUSR1", unit)

    def restarted() -> bool:
        now = show(unit)
        return (
            now.get("NRestarts", "0") not in ("", "0")
            and now.get("ActiveState") == "active"
            and now.get("MainPID") not in ("0", first_pid)
        )

    def gave_up() -> bool:
        return show(unit).get("ActiveState") == "failed"

    observed["restarted"] = wait_for(lambda: restarted() or gave_up(), RESTART_WAIT_S)
    observed["restarted"] = restarted()
    observed["after_restart"] = show(unit)
    systemctl("stop", unit)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        return f"unreadable: {exc}"


def main() -> int:
    results, unit = Path(sys.argv[1]), sys.argv[2]
    observed: dict[str, object] = {"completed": False}
    try:
        drive(results, unit, observed)
        observed["completed"] = True
    except Exception:  # recorded for the host to report, with the other steps' results
        observed["error"] = traceback.format_exc()
    observed["journal"] = subprocess.run(
        ["journalctl", "--no-pager", "-u", unit], capture_output=True, text=True, check=False
    ).stdout
    observed["events"] = read_events(results / "events.jsonl")
    tmp = results / "observed.json.tmp"
    tmp.write_text(json.dumps(observed, indent=1, default=str))
    os.replace(tmp, results / "observed.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
