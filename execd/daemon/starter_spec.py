"""The starter's spec for one job: what the job ad, its slot and the config ask for.

The contract between the daemon and a starter (execd/starter/spec.py): the job's command,
user, files and environment from its ad; its resources from its slot (the d-slot's own
GPUs, and only those) with the variables condor_starter sets for them (from the slot's
ad: execd/daemon/assigned_env.py); limits and policies from the config; where the
starter writes its report, status and job-exit notice (the job's directory in SPOOL);
the texts of the job's `.job.ad` and `.machine.ad` (ad_file_texts).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from execd.cgroups.tree import CgroupTree
from execd.classads import new_ad
from execd.config.settings import Settings
from execd.daemon.assigned_env import assigned_resource_env
from execd.machine.facts import GpuInfo
from execd.machine.gpu_hiding import GpuHiding, gpus_to_hide
from execd.starter.spec import StarterSpec, parse_signal
from execd.starter.sshd_list import SSH_SESSIONS_FILE
from execd.wire.classad_codec import from_classad, long_form


def starter_spec(job_id: str, slot: str, ad: dict[str, Any], facts: dict[str, Any], *,
                 settings: Settings, execute: Path, tree: CgroupTree, workdir: Path,
                 slot_ad: Any = None, node_gpus: Sequence[GpuInfo] = ()) -> StarterSpec:
    """node_gpus: every GPU of the node (the ones not the slot's are hidden from the job)."""
    args = ad.get("Args", ad.get("Arguments", []))
    if isinstance(args, str):
        args = args.split()
    env = ad.get("Env", {})
    if isinstance(env, str):
        env = dict(p.split("=", 1) for p in env.split(";") if "=" in p)
    # The d-slot's own GPUs (AssignedGPUs), and only those, are the job's.
    gpus = [g for g in str(facts.get("AssignedGPUs", "")).replace(" ", "").split(",") if g]
    hiding = GpuHiding()
    # Only GPUs detected through NVML have device files to hide: a node whose GPUs are
    # only configured (MACHINE_RESOURCE_GPUs) has nothing to hide, and says so once, at
    # detection (gpu_detection_skipped / _failed), not at every job.
    if settings.get_bool("STARTER_HIDE_GPU_DEVICES", True) and any(
            gpu.device is not None for gpu in node_gpus):
        hiding = gpus_to_hide(node_gpus, gpus)
    return StarterSpec(
        job_id=job_id,
        slot_name=slot,
        cmd=str(ad.get("Cmd", "")),
        args=[str(a) for a in args],
        env={str(k): str(v) for k, v in env.items()},
        owner=str(ad.get("Owner", "nobody")),
        execute_dir=str(execute),
        report_path=str(workdir / "report.json"),
        exit_fifo=str(workdir / "job_exited"),
        cgroup_mount=str(tree.hierarchy.mount),
        base_cgroup=str(tree.base.relative_to(tree.hierarchy.mount)),
        cpus=float(facts.get("Cpus", 1)),
        memory_mb=int(facts.get("Memory", 0)),
        gpus=gpus,
        resource_env={} if slot_ad is None else assigned_resource_env(
            slot_ad, settings.get_str,
            settings.get_bool("AUTO_SET_NVIDIA_VISIBLE_DEVICES", True)),
        stdin=ad.get("In"),
        stdout=ad.get("Out"),
        stderr=ad.get("Err"),
        iwd=ad.get("Iwd"),
        kill_sig=parse_signal(ad.get("KillSig", "SIGTERM")),
        vacate_seconds=float(settings.get_int("MachineMaxVacateTime") or 600),
        polling_interval=float(settings.get_int("CGROUP_POLLING_INTERVAL") or 5),
        use_peak_memory=settings.get_bool("CGROUP_USE_PEAK_MEMORY", False),
        ignore_cache_memory=settings.get_bool("CGROUP_IGNORE_CACHE_MEMORY", True),
        allow_runas_owner=settings.get_bool("STARTER_ALLOW_RUNAS_OWNER", True),
        slot_user=settings.get_str("SLOT_USER", slot=int(slot[4:].partition("_")[0])),
        memory_policy=settings.get_str("CGROUP_MEMORY_LIMIT_POLICY") or "hard",
        disable_swap=settings.get_bool("DISABLE_SWAP_FOR_JOB", True),
        pids_max=settings.get_int("EXECD_PIDS_MAX") or None,
        always_hold_on_oom=settings.get_bool("STARTER_ALWAYS_HOLD_ON_OOM", True),
        status_path=str(workdir / "status.json"),
        ssh_sessions_file=str(workdir / SSH_SESSIONS_FILE),
        pid_namespace=settings.get_bool("USE_PID_NAMESPACES"),
        network_namespace=settings.get_bool("EXECD_JOB_NETWORK_NAMESPACE"),
        thread_env_vars=settings.get_list("STARTER_NUM_THREADS_ENV_VARS"),
        hide_devices=[list(device) for device in hiding.devices],
        gpu_hiding_problem=hiding.problem,
    )


def ad_file_texts(job_ad: dict[str, Any], slot_ad: Any) -> tuple[str, str]:
    """The spec's job_ad and machine_ad: a local job's ad as it was activated and its
    slot's ad as execd publishes it (a classad2 ClassAd), in condor_starter's long form,
    private attributes left out (execd/starter/ad_files.py)."""
    machine = long_form(from_classad(slot_ad)) if slot_ad is not None else ""
    return long_form(from_classad(new_ad(job_ad))), machine
