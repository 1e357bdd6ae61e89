"""What the daemon tells a starter: the job, the slot's resources, where things go.

Passed as one JSON object (a file path on the starter's command line) so the starter
needs nothing but the stdlib to read it. Bad input is a ValueError naming the field.
"""

from __future__ import annotations

import signal
from typing import Any, NamedTuple


def _req(d: dict[str, Any], key: str, kind: type) -> Any:
    if key not in d:
        raise ValueError(f"starter spec is missing {key!r}")
    value = d[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind):
        raise ValueError(f"starter spec {key!r} must be {kind.__name__}, got {value!r}")
    return value


def _opt(d: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    return _req(d, key, kind) if d.get(key) is not None else default


def _string_map(d: dict[str, Any], key: str) -> dict[str, str]:
    found: dict[str, str] = _opt(d, key, dict, {})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise ValueError(f"starter spec {key!r} must map strings to strings")
    return found


def parse_signal(name: str | int) -> int:
    """KillSig as HTCondor writes it: SIGTERM, TERM, or a number."""
    if isinstance(name, int):
        return name
    text = name.strip().upper()
    if text.isdigit():
        return int(text)
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(signal.Signals[text])
    except KeyError:
        raise ValueError(f"KillSig {name!r} is not a signal name") from None


# A slot ad's CondorScratchDir, as condor_startd's: a job's $$(CondorScratchDir) is
# expanded to it at match time, and the starter replaces it in the job's environment
# with the job's scratch directory.
SCRATCH_DIR_PLACEHOLDER = "#CoNdOrScRaTcHdIr#"

# What the daemon controls a starter with (execd/starter/run.py says what each does).
# Their default action ends a process, and a starter blocks them only once its main()
# runs: it is started with them blocked, so that one sent before (a Suspend at once
# after the activation) waits for it.
CONTROL_SIGNALS = frozenset({signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGQUIT})

# STARTER_NUM_THREADS_ENV_VARS's default: each is set to the job's number of CPUs.
THREAD_ENV_VARS = [
    "CUBACORES", "GOMAXPROCS", "JULIA_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
    "OMP_NUM_THREADS", "OMP_THREAD_LIMIT", "OPENBLAS_NUM_THREADS", "PYTHON_CPU_COUNT",
    "ROOT_MAX_THREADS", "TF_LOOP_PARALLEL_ITERATIONS", "TF_NUM_THREADS",
]  # fmt: skip


class StarterSpec(NamedTuple):
    job_id: str
    slot_name: str
    cmd: str
    args: list[str]
    env: dict[str, str]
    owner: str
    execute_dir: str
    report_path: str
    cgroup_mount: str
    base_cgroup: str
    cpus: float = 1.0
    memory_mb: int = 0
    gpus: list[str] = []  # noqa: RUF012 - NamedTuple default, never mutated
    # The variables of the slot's assigned resources (execd/daemon/assigned_env.py):
    # _CONDOR_AssignedGPUs, CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES, ...
    resource_env: dict[str, str] = {}  # noqa: RUF012 - NamedTuple default, never mutated
    stdin: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    iwd: str | None = None
    kill_sig: int = signal.SIGTERM
    vacate_seconds: float = 10.0
    polling_interval: float = 5.0
    use_peak_memory: bool = False  # CGROUP_USE_PEAK_MEMORY (resident_set.py)
    ignore_cache_memory: bool = True  # CGROUP_IGNORE_CACHE_MEMORY
    allow_runas_owner: bool = True
    slot_user: str | None = None
    memory_policy: str = "hard"
    custom_hard_memory_mb: int | None = None
    low_memory_mb: int | None = None
    disable_swap: bool = False
    pids_max: int | None = None
    cpu_max_cpus: float | None = None
    always_hold_on_oom: bool = True
    # Where the starter leaves its latest measurements every polling interval, for the
    # daemon's starter policy (seed 002) and the UPDATE_JOB_INFO hook. None: not written.
    status_path: str | None = None
    # A FIFO the daemon reads: one line the moment the job has exited, while the starter
    # still cleans up (the slot's Busy -> Cleaning). None: the starter's exit says it.
    exit_fifo: str | None = None
    pid_namespace: bool = False  # USE_PID_NAMESPACES
    network_namespace: bool = False  # EXECD_JOB_NETWORK_NAMESPACE: loopback only
    thread_env_vars: list[str] = THREAD_ENV_VARS
    # A sandbox made before the starter (pool jobs: the shadow's input is already in
    # it). The starter gives it to the job's user and leaves it in place when the job
    # ends (its output is transferred afterwards); None: EXECUTE/dir_<starter pid>.
    sandbox: str | None = None
    # STARTER_HIDE_GPU_DEVICES: (major, minor) of each device file the job may not open,
    # and why a GPU not the job's stays visible (logged and reported by the starter).
    hide_devices: list[list[int]] = []  # noqa: RUF012 - NamedTuple default, never mutated
    gpu_hiding_problem: str | None = None
    # `.job.ad` and `.machine.ad`, as the starter writes them into the scratch directory
    # (execd/starter/ad_files.py); None: not written by the starter (a pool job's
    # conversation wrote them into its sandbox already).
    job_ad: str | None = None
    machine_ad: str | None = None
    # An interactive job's (InteractiveJob): its end waits for its condor_ssh_to_job
    # sessions' sshds (those listed in ssh_sessions_file) to end too, as condor_starter
    # counts its sshd among its jobs; the first session's shell setup kills the job's
    # placeholder.
    wait_for_ssh_sessions: bool = False
    # Where the job's conversation lists the sshds it started (the starter's directory:
    # execd.starter.sshd_list); None: the starter waits for none.
    ssh_sessions_file: str | None = None

    @property
    def slot_number(self) -> str:
        """`slot1_2` -> `1`, as _CONDOR_SLOT's partner SLOT<N>_USER uses it."""
        digits = self.slot_name.removeprefix("slot").split("_")[0]
        return digits if digits.isdigit() else ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StarterSpec:
        args = _opt(d, "args", list, [])
        env = _string_map(d, "env")
        if not all(isinstance(a, str) for a in args):
            raise ValueError("starter spec 'args' must be a list of strings")
        hide_devices = _opt(d, "hide_devices", list, [])
        if not all(isinstance(dev, list) and len(dev) == 2
                   and all(type(n) is int and n >= 0 for n in dev) for dev in hide_devices):
            raise ValueError("starter spec 'hide_devices' must be a list of [major, minor]")
        return cls(
            job_id=_req(d, "job_id", str),
            slot_name=_req(d, "slot_name", str),
            cmd=_req(d, "cmd", str),
            args=args,
            env=env,
            owner=_req(d, "owner", str),
            execute_dir=_req(d, "execute_dir", str),
            report_path=_req(d, "report_path", str),
            cgroup_mount=_req(d, "cgroup_mount", str),
            base_cgroup=_req(d, "base_cgroup", str),
            cpus=_opt(d, "cpus", float, 1.0),
            memory_mb=_opt(d, "memory_mb", int, 0),
            gpus=_opt(d, "gpus", list, []),
            resource_env=_string_map(d, "resource_env"),
            stdin=_opt(d, "stdin", str, None),
            stdout=_opt(d, "stdout", str, None),
            stderr=_opt(d, "stderr", str, None),
            iwd=_opt(d, "iwd", str, None),
            kill_sig=parse_signal(d.get("kill_sig") or "SIGTERM"),
            vacate_seconds=_opt(d, "vacate_seconds", float, 10.0),
            polling_interval=_opt(d, "polling_interval", float, 5.0),
            use_peak_memory=_opt(d, "use_peak_memory", bool, False),
            ignore_cache_memory=_opt(d, "ignore_cache_memory", bool, True),
            allow_runas_owner=_opt(d, "allow_runas_owner", bool, True),
            slot_user=_opt(d, "slot_user", str, None),
            memory_policy=_opt(d, "memory_policy", str, "hard"),
            custom_hard_memory_mb=_opt(d, "custom_hard_memory_mb", int, None),
            low_memory_mb=_opt(d, "low_memory_mb", int, None),
            disable_swap=_opt(d, "disable_swap", bool, False),
            pids_max=_opt(d, "pids_max", int, None),
            cpu_max_cpus=_opt(d, "cpu_max_cpus", float, None),
            always_hold_on_oom=_opt(d, "always_hold_on_oom", bool, True),
            status_path=_opt(d, "status_path", str, None),
            exit_fifo=_opt(d, "exit_fifo", str, None),
            pid_namespace=_opt(d, "pid_namespace", bool, False),
            network_namespace=_opt(d, "network_namespace", bool, False),
            thread_env_vars=_opt(d, "thread_env_vars", list, THREAD_ENV_VARS),
            sandbox=_opt(d, "sandbox", str, None),
            hide_devices=hide_devices,
            gpu_hiding_problem=_opt(d, "gpu_hiding_problem", str, None),
            job_ad=_opt(d, "job_ad", str, None),
            machine_ad=_opt(d, "machine_ad", str, None),
            wait_for_ssh_sessions=_opt(d, "wait_for_ssh_sessions", bool, False),
            ssh_sessions_file=_opt(d, "ssh_sessions_file", str, None),
        )
