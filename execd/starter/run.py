"""The starter's main loop: set up, fork the job into its cgroup, watch it, report.

Control from the daemon is by signal to the starter (documented in launcher.py):
SIGUSR1 suspend (freeze), SIGUSR2 continue (thaw), SIGTERM soft kill (thaw, the job's
KillSig, hard kill after the vacate time), SIGQUIT hard kill (cgroup.kill). Signals are
blocked and taken with sigtimedwait, so there are no handlers and no races.
What it measures of the job each polling interval: measurements.py.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from execd.cgroups.discovery import Hierarchy
from execd.cgroups.fs import CgroupFS
from execd.cgroups.limits import LimitPlan, LimitSettings, plan_limits
from execd.cgroups.tree import CgroupTree, JobCgroup
from execd.errors import CgroupError
from execd.starter import report as rpt
from execd.starter.ad_files import ad_file_env, write_ad_files
from execd.starter.child import become_job
from execd.starter.clone import fork_into_cgroup
from execd.starter.hiding import hide_gpu_devices
from execd.starter.measurements import JobMeasurements
from execd.starter.sandbox import (
    adopt_scratch,
    disk_usage_kb,
    job_environment,
    make_scratch,
    remove_tree,
    resolve_user,
)
from execd.starter.spec import CONTROL_SIGNALS, StarterSpec
from execd.starter.sshd_list import (
    SESSIONS_POLL_S,
    START_WAIT_S,
    sshds_open,
    stop_waiting,
    wait_for_starts,
)

# Taken with sigtimedwait: the daemon's control signals, and the job's end.
CONTROL = {*CONTROL_SIGNALS, signal.SIGCHLD}


def event(name: str, **kv: object) -> None:
    """One log line per event on stderr (the launcher points it at the starter log)."""
    fields = " ".join(f"{k}={v}" for k, v in kv.items())
    sys.stderr.write(f"{name} {fields}\n")
    sys.stderr.flush()


class Starter:
    def __init__(self, spec: StarterSpec, fs: CgroupFS | None = None) -> None:
        self.spec = spec
        self.fs = fs if fs is not None else CgroupFS()
        base = Path(spec.cgroup_mount) / spec.base_cgroup
        enabled = frozenset(self.fs.read(base / "cgroup.subtree_control").split())
        self.tree = CgroupTree(
            self.fs, Hierarchy(Path(spec.cgroup_mount), enabled), spec.base_cgroup
        )
        self.cgroup: JobCgroup = self.tree.job(spec.slot_name)
        self.plan: LimitPlan = plan_limits(
            LimitSettings(
                memory_mb=spec.memory_mb,
                cpus=spec.cpus,
                memory_policy=spec.memory_policy,
                custom_hard_memory_mb=spec.custom_hard_memory_mb,
                low_memory_mb=spec.low_memory_mb,
                disable_swap=spec.disable_swap,
                pids_max=spec.pids_max,
                cpu_max_cpus=spec.cpu_max_cpus,
            ),
            self.tree.controllers,
        )
        self.user = resolve_user(spec, os.geteuid())
        self.report: dict[str, Any] = {"StarterPid": os.getpid(), "JobId": spec.job_id}
        self.pid = 0
        self.measured = JobMeasurements(self.cgroup, spec.use_peak_memory,
                                        spec.ignore_cache_memory)  # fmt: skip
        self.status: int | None = None
        self.frozen = False
        self.hard_kill_at: float | None = None
        self.exit_reason = "exited"
        self.job_state = "Running"
        self.entered_state = int(time.time())
        self.init_status_r: int | None = None

    # -- setup ---------------------------------------------------------------
    def start(self) -> None:
        spec, user = self.spec, self.user
        if self.cgroup.populated():
            # A job left behind (unkillable, or still running under a starter we do not
            # know): never start another in its cgroup, never kill it from here.
            raise CgroupError(
                f"{self.cgroup.slice} still holds processes of an earlier job; "
                f"job {spec.job_id} is not started in it"
            )
        if self.fs.exists(self.cgroup.slice):
            # Empty, but left by a starter that did not finish: it may still carry that
            # job's limits and device program. A fresh one carries only this job's.
            self.cgroup.destroy()
        self.cgroup.create()
        self.cgroup.apply_limits(self.plan.writes)
        event("cgroup_limits", slot=spec.slot_name, enforcement=repr(self.plan.describe()))
        hiding = hide_gpu_devices(spec, self.cgroup.slice)
        self.report.update(hiding)
        if "HiddenDevices" in hiding:
            event("gpu_devices_hidden", job=spec.job_id, devices=hiding["HiddenDevices"])
        if "GpuHidingProblem" in hiding:
            event("gpu_devices_not_hidden", job=spec.job_id,
                  reason=repr(hiding["GpuHidingProblem"]))
        self.scratch = (adopt_scratch(spec.sandbox, user) if spec.sandbox
                        else make_scratch(spec.execute_dir, os.getpid(), user))
        iwd = spec.iwd or self.scratch
        cmd = spec.cmd if os.path.isabs(spec.cmd) else os.path.join(iwd, spec.cmd)
        env = job_environment(spec, self.scratch)
        if spec.job_ad is not None and spec.machine_ad is not None:
            try:
                write_ad_files(self.scratch, spec.job_ad, spec.machine_ad, user.uid, user.gid)
            except OSError as exc:  # the job runs without them, as condor_starter's
                event("job_ad_files_not_written", job=spec.job_id, error=repr(str(exc)))
            env |= ad_file_env(self.scratch)
        self.report["JobUser"] = user.name
        self.report["CgroupEnforcement"] = self.plan.describe()
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        init_status_w = self.enter_pid_namespace()
        self.started = time.monotonic()
        # Born in its cgroup where the kernel can (not with a PID namespace: unshare made
        # the next fork() its init); else forked, and it moves itself there.
        pid = None if init_status_w is not None else fork_into_cgroup(str(self.cgroup.leaf))
        in_cgroup = pid is not None
        if pid is None:
            pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            become_job(
                procs_file=None if in_cgroup else str(self.cgroup.procs_file),
                user=user,
                iwd=iwd,
                stdio=(spec.stdin, spec.stdout, spec.stderr),
                argv=[cmd, *spec.args],
                env=env,
                error_fd=write_fd,
                network_namespace=spec.network_namespace,
                status_fd=init_status_w,
                forwarded=self.forwarded_signals(),
            )
        os.close(write_fd)
        if init_status_w is not None:
            os.close(init_status_w)
        self.pid = pid
        failure = os.read(read_fd, 4096).decode(errors="replace")
        os.close(read_fd)
        if failure:
            os.waitpid(pid, 0)
            self.status = None
            self.exit_reason = "spawn_failed"
            errno_text, _, message = failure.partition(" ")
            self.report["SpawnError"] = message
            self.hold(
                rpt.HOLD_FAILED_TO_CREATE_PROCESS,
                int(errno_text or 0),
                f"Failed to execute '{cmd}': {message}",
            )
            event("job_spawn_failed", job=spec.job_id, reason=repr(message))
        else:
            event("job_started", job=spec.job_id, pid=pid, user=user.name)

    def enter_pid_namespace(self) -> int | None:
        """USE_PID_NAMESPACES: the next child is pid 1 of a new namespace (its init).

        Returns the write end of the pipe on which the init passes on the job's status.
        """
        if not self.spec.pid_namespace:
            return None
        from execd.starter import namespaces  # noqa: PLC0415 - only when configured

        namespaces.enter_new_pid_namespace()
        self.init_status_r, write = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        return write

    def forwarded_signals(self) -> frozenset[int]:
        if not self.spec.pid_namespace:
            return frozenset()
        from execd.starter.namespaces import FORWARDED  # noqa: PLC0415 - as above

        return FORWARDED | {self.spec.kill_sig}

    # -- control -------------------------------------------------------------
    def hold(self, code: int, subcode: int, reason: str) -> None:
        self.report["HoldReasonCode"] = code
        self.report["HoldReasonSubCode"] = subcode
        self.report["HoldReason"] = reason

    def suspend(self) -> None:
        self.measure()
        self.cgroup.freeze()
        self.frozen = True
        self.enter_state("Suspended")
        event("job_suspended", job=self.spec.job_id)

    def resume(self) -> None:
        self.cgroup.thaw()
        self.frozen = False
        self.enter_state("Running")
        event("job_continued", job=self.spec.job_id)

    def enter_state(self, state: str) -> None:
        self.job_state = state
        self.entered_state = int(time.time())
        self.publish_status()

    def publish_status(self) -> None:
        """The measurements seed 002's STARTER_* expressions and job hooks look at."""
        if self.spec.status_path is None:
            return
        rpt.write_status(
            self.spec.status_path,
            {
                "JobState": self.job_state,
                "EnteredCurrentState": self.entered_state,
                "RemoteWallClockTime": round(time.monotonic() - self.started, 3),
                "JobPid": self.pid,
                **self.measured.status_attrs(),
            },
        )

    def soft_kill(self) -> None:
        if self.frozen:
            self.resume()
        if self.exit_reason == "exited":
            self.exit_reason = "soft_killed"
        if self.status is not None:  # only its ssh sessions were left: finish() kills
            return  # them (its reaped pid is never signalled again)
        try:  # noqa: SIM105 - contextlib would cost the starter's start-up ~10 ms
            os.kill(self.pid, self.spec.kill_sig)
        except ProcessLookupError:
            pass
        if self.hard_kill_at is None:
            self.hard_kill_at = time.monotonic() + self.spec.vacate_seconds
            self.enter_state("Vacating")
        event("job_soft_killed", job=self.spec.job_id, signal=self.spec.kill_sig)

    def hard_kill(self, reason: str = "hard_killed") -> None:
        if self.exit_reason in ("exited", "soft_killed"):
            self.exit_reason = reason
        self.measured.count_processes()  # a last count, not a full measure
        self.enter_state("Killing")
        self.cgroup.kill()
        if self.frozen:
            self.cgroup.thaw()  # killed tasks still need to run to exit
            self.frozen = False
        event("job_hard_killed", job=self.spec.job_id)

    # -- watching ------------------------------------------------------------
    def measure(self) -> None:
        """Sample the job, and enforce the memory policy (no memory controller)."""
        usage = self.measured.sample()
        limit = self.plan.policy_memory_mb
        if (
            limit
            and usage.memory_bytes > limit * 1024 * 1024
            and "HoldReasonCode" not in self.report
        ):
            used_mb = math.ceil(usage.memory_bytes / (1024 * 1024))
            self.hold(
                rpt.HOLD_OUT_OF_RESOURCES,
                rpt.HOLD_SUBCODE_MEMORY,
                rpt.memory_hold_reason(limit, used_mb),
            )
            event("job_over_memory_limit", job=self.spec.job_id, limit_mb=limit, usage_mb=used_mb)
            self.hard_kill("held")

    def reap(self) -> None:
        if self.status is not None:
            return
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == self.pid:
            self.status = status
            if self.init_status_r is not None:  # the init's own status is not the job's
                from execd.starter.namespaces import read_job_status  # noqa: PLC0415

                job_status = read_job_status(self.init_status_r)
                self.status = status if job_status is None else job_status

    def sessions_open(self) -> bool:
        """An interactive job's sshds still run (execd.starter.sshd_list); a kill
        requested ends the wait: the sessions go with the job (finish() kills them),
        and no new one starts."""
        if self.exit_reason != "exited" or self.hard_kill_at is not None:
            if self.spec.wait_for_ssh_sessions and stop_waiting(self.spec):
                wait_for_starts(self.spec, START_WAIT_S)  # (their sshds: in the slice)
            return False
        return sshds_open(self.spec, self.report)

    def watch(self) -> None:
        next_poll = time.monotonic()
        while self.status is None or self.sessions_open():
            now = time.monotonic()
            if now >= next_poll:
                self.measure()
                self.publish_status()
                next_poll = now + self.spec.polling_interval
            if self.hard_kill_at is not None and now >= self.hard_kill_at:
                self.hard_kill_at = None
                self.hard_kill()
            deadline = min(next_poll, self.hard_kill_at or next_poll)
            if self.status is not None:
                deadline = min(deadline, now + SESSIONS_POLL_S)
            info = signal.sigtimedwait(CONTROL, max(0.0, deadline - time.monotonic()))
            if info is not None:
                self.dispatch(info.si_signo)
            self.reap()

    def dispatch(self, signo: int) -> None:
        if signo == signal.SIGUSR1:
            self.suspend()
        elif signo == signal.SIGUSR2:
            self.resume()
        elif signo == signal.SIGTERM:
            self.soft_kill()
        elif signo == signal.SIGQUIT:
            self.hard_kill()

    # -- the end -------------------------------------------------------------
    def announce_exit(self) -> None:
        """Tell the daemon the job has exited before cleaning up (its slot goes Cleaning).

        Best effort: with no daemon reading (restarting), the starter's exit says it.
        """
        if self.spec.exit_fifo is None:
            return
        try:
            fd = os.open(self.spec.exit_fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            os.write(fd, b"job_exited\n")
        except OSError:
            pass
        finally:
            os.close(fd)

    def finish(self) -> None:
        spec = self.spec
        wall = time.monotonic() - self.started
        usage = self.measured.sample()  # the final update's (read before the cgroup goes)
        self.check_oom()
        if self.exit_reason != "spawn_failed":  # a job that never started has no status
            self.publish_status()
        try:
            self.cgroup.kill()  # whatever the job left behind goes with it
        except CgroupError as exc:
            # The daemon marks the slot broken with this reason (unkillable processes).
            self.report["SlotBrokenReason"] = str(exc)
            event("slot_broken", slot=spec.slot_name, reason=repr(str(exc)))
        status = self.status
        if status is not None and os.WIFSIGNALED(status):
            self.report.update(ExitBySignal=True, ExitSignal=os.WTERMSIG(status))
            if os.WCOREDUMP(status):  # (condor_starter's JobCoreDumped: only when true)
                self.report["JobCoreDumped"] = True
        elif status is not None:
            self.report.update(ExitBySignal=False, ExitCode=os.WEXITSTATUS(status))
        if "HoldReasonCode" in self.report and self.exit_reason != "spawn_failed":
            self.exit_reason = "held"
        self.report.update(
            ExitReason=self.exit_reason,
            JobPid=self.pid,
            RemoteWallClockTime=round(wall, 3),
            DiskUsage=disk_usage_kb(self.scratch),
            **self.measured.report_attrs(usage),
        )
        if not spec.sandbox:  # a pre-made one is its maker's: output goes from there
            remove_tree(self.scratch)
        if "SlotBrokenReason" not in self.report:
            self.cgroup.destroy()
        rpt.write_durably(spec.report_path, self.report)
        event("job_finished", job=spec.job_id, reason=self.exit_reason)

    def check_oom(self) -> None:
        limit = self.plan.writes.get("memory.max")
        limit_mb = int(limit) // (1024 * 1024) if limit else self.spec.memory_mb
        # condor_starter's OOM message says its ImageSize (the peak measured), or the
        # limit where it measured none or STARTER_ALWAYS_HOLD_ON_OOM (the default): a
        # job killed between two measurements was at its limit, not at the last one
        used_mb = self.measured.max_image_bytes // (1024 * 1024)
        if used_mb == 0 or self.spec.always_hold_on_oom:
            used_mb = limit_mb
        outcome = rpt.oom_outcome(
            self.cgroup.oom_events(), limit_mb, used_mb, self.spec.always_hold_on_oom
        )
        if outcome == "evict":
            self.exit_reason = "evicted_oom"
            event("job_oom_evicted", job=self.spec.job_id, limit_mb=limit_mb, usage_mb=used_mb)
        elif outcome == "hold":
            self.hold(
                rpt.HOLD_OUT_OF_RESOURCES,
                rpt.HOLD_SUBCODE_MEMORY,
                rpt.memory_hold_reason(limit_mb, used_mb),
            )
            event("job_oom_held", job=self.spec.job_id, limit_mb=limit_mb, usage_mb=used_mb)
