"""Every configuration knob execd reads, declared once: name, type, default, doc.

Defaults are HTCondor 25.x's (as default text, expanded like any value) unless the doc
says the knob is execd's own. Families of knobs (``SLOT_TYPE_<N>``,
``MACHINE_RESOURCE_<name>``) are declared as patterns. docs/config.md is generated from
this table (`python -m execd.config.docgen`); a test keeps it current.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from functools import cache


class Kind(enum.Enum):
    INT = "integer"  # may be written as a ClassAd expression (`10 * 60`)
    FLOAT = "number"
    BOOL = "boolean"
    STRING = "string"
    PATH = "path"
    LIST = "list"  # comma and/or space separated
    EXPR = "ClassAd expression"  # parsed at load time; a bad one is a ConfigError
    MACRO = "macro"  # a helper referenced by other values, not read directly


@dataclass(frozen=True)
class Knob:
    name: str  # as documented; a pattern uses <N> / <name> placeholders
    kind: Kind
    default: str | None  # HTCondor's default text; None: no default (unset)
    doc: str
    group: str
    ours: bool = False  # execd's own knob, not HTCondor's

    @property
    def is_pattern(self) -> bool:
        return "<" in self.name

    @property
    def regex(self) -> re.Pattern[str]:
        text = re.escape(self.name.upper())
        text = text.replace(re.escape("<N>"), r"\d+").replace(re.escape("<NAME>"), r"\w+")
        return re.compile(f"^{text}$", re.I)


_KNOBS: list[Knob] = []


def _group(group: str, *entries: tuple[str, Kind, str | None, str] | tuple[str, Kind, str | None, str, bool]) -> None:
    for entry in entries:
        name, kind, default, doc = entry[:4]
        ours = bool(entry[4]) if len(entry) > 4 else False
        _KNOBS.append(Knob(name, kind, default, doc, group, ours))


I, F, B, S, P, L, E, M = (  # noqa: E741  (short aliases keep the table readable)
    Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.STRING, Kind.PATH, Kind.LIST, Kind.EXPR, Kind.MACRO,
)

_group(
    "Locations",
    ("LOCAL_DIR", P, "$(EXECD_STATE_DIR)", "Root of execd's state: EXECUTE, SPOOL, LOG and ETC default under it. "
     "HTCondor's default is $(TILDE), the condor user's home (its packaged condor_config says /var); "
     "execd's is a directory of its own.", True),
    ("EXECD_STATE_DIR", P, None, "Built in: /var/lib/execd when execd runs as root, else ~/.local/state/execd.", True),
    ("EXECUTE", P, "$(LOCAL_DIR)/execute", "Where job sandboxes (dir_<id>) are created."),
    ("SPOOL", P, "$(LOCAL_DIR)/spool", "Durable state: execd's SQLite store lives here."),
    ("LOG", P, "$(LOCAL_DIR)/log", "Directory for log files."),
    ("LOCK", P, "$(LOG)", "Directory for lock files."),
    ("RUN", P, "$(LOCK)", "Directory for the control socket and pid file."),
    ("LOCAL_CONFIG_FILE", L, "", "Config files read after the main one, in order."),
    ("LOCAL_CONFIG_DIR", L, "", "Directories whose files are read (lexical order) after the main config file."),
    ("LOCAL_CONFIG_DIR_EXCLUDE_REGEXP", S,
     r"^((\..*)|(.*\.pl)|(.*\.py)|(.*\.sh)|(.*~)|(#.*)|(.*\.rpmsave)|(.*\.rpmnew)|(.*\.dpkg-old)|(.*\.dpkg-dist)|(.*\.cfsaved))$",
     "File names in LOCAL_CONFIG_DIR that are skipped."),
    ("ETC", P, "$(LOCAL_DIR)", "Directory of the node's keys (SEC_PASSWORD_DIRECTORY); HTCondor's packaged condor_config sets /etc/condor."),
    ("RELEASE_DIR", P, "/usr", "Installation prefix."),
    ("LIBEXEC", P, "$(RELEASE_DIR)/libexec", "Helper programs (condor_ssh_to_job_sshd_setup and condor_ssh_to_job_shell_setup are HTCondor's, found here)."),
    ("LIB", P, "$(RELEASE_DIR)/lib", "Library files (HTCondor's condor_ssh_to_job_sshd_config_template)."),
    ("GPU_MONITOR", P, "$(LIBEXEC)/condor_gpu_utilization", "GPU usage monitor that use FEATURE : GPUs runs as a cron job."),
    ("GPU_DISCOVERY_EXTRA", S, None, "Extra arguments for condor_gpu_discovery in use FEATURE : GPUs and in STARTD_DETECT_GPUS's default. Unset in HTCondor 25.14.1 (its manual says `-extra`, its defaults table has none)."),
)
_group(
    "Logging (execd's own)",
    ("EXECD_LOG", P, "$(LOG)/ExecdLog", "Log file; '-' or 'stderr' logs to standard error (journald under systemd).", True),
    ("EXECD_LOG_LEVEL", S, "info", "Lowest level logged: debug, info, warning or error.", True),
    ("EXECD_LOG_FORMAT", S, "json", "json (one object per line) or console (for a person).", True),
    ("EXECD_LOG_MAX_BYTES", I, "0", "Rotate the log file at this size (renamed to .old); 0 leaves rotation to logrotate and SIGUSR1.", True),
)
_group(
    "Startd history",
    ("STARTD_HISTORY", P, "$(LOG)/startd_history", "File execd appends each ended job's ad to (condor_history -startd)."),
    ("STARTD_PER_JOB_HISTORY_DIR", P, None, "Directory that also gets each ended job's ad as history.<GlobalJobId> (written whole, then renamed); unset: none."),
    ("HISTORY_CONTAINS_JOB_ENVIRONMENT", B, "true", "false leaves the job's Env and Environment out of its history record."),
    ("ENABLE_HISTORY_ROTATION", B, "true", "Rotate STARTD_HISTORY by MAX_HISTORY_LOG and ROTATE_HISTORY_DAILY/_MONTHLY."),
    ("MAX_HISTORY_LOG", I, "20971520", "Bytes STARTD_HISTORY may reach before it is renamed <file>.<YYYYMMDDTHHMMSS> (local time)."),
    ("MAX_HISTORY_ROTATIONS", I, "2", "Rotated history files kept (at least 1); the oldest beyond it are removed."),
    ("ROTATE_HISTORY_DAILY", B, "false", "Also rotate STARTD_HISTORY at its first record of a new day."),
    ("ROTATE_HISTORY_MONTHLY", B, "false", "Also rotate STARTD_HISTORY at its first record of a new month."),
)
_group(
    "Daemon (execd's own)",
    ("EXECD_ADMIN_GROUP", S, "", "Unix group whose members may drain, vacate, reconfig and turn execd off over the control socket.", True),
    ("EXECD_SCHEDULER_USERS", L, "", "Local users allowed to request and manage claims over the control socket.", True),
    ("EXECD_PIDS_MAX", I, "0", "pids.max for each job's cgroup; 0 means no limit.", True),
    ("EXECD_JOB_NETWORK_NAMESPACE", B, "false", "Run each job in its own network namespace whose only interface, lo, is up (set with pyroute2; adds ~0.2 s to each job's start). Needs root.", True),
    ("EXECD_STARTER_MEMORY_POLICY_MARGIN", F, "1.0", "Where the memory controller is missing, evict at this fraction of the slot's memory.", True),
)
_group(
    "Timers and intervals",
    ("UPDATE_INTERVAL", I, "300", "Seconds between slot ad updates (and policy evaluation when no slot is claimed)."),
    ("UPDATE_OFFSET", I, "0", "Delay before the first update, to spread a pool's updates."),
    ("POLLING_INTERVAL", I, "5", "Seconds between policy evaluations while any slot is claimed."),
    ("MATCH_TIMEOUT", I, "120", "Seconds a slot stays Matched waiting for the claim request."),
    ("KILLING_TIMEOUT", I, "30", "Seconds in Preempting/Killing before the starter's whole family is killed."),
    ("MachineMaxVacateTime", I, "$(MaxVacateTime)", "Seconds a job is given to vacate after its soft kill signal."),
    ("MAXJOBRETIREMENTTIME", I, "0", "Seconds of retirement a job may use before it is preempted; the job may ask for less."),
    ("CLAIM_WORKLIFE", I, "1200", "Seconds after which a claim accepts no new jobs; -1 is forever."),
    ("MAX_CLAIM_ALIVES_MISSED", I, "6", "Keep-alives a claim may miss before it is released."),
    ("ALIVE_INTERVAL", I, "300", "Seconds between keep-alives a claim holder sends."),
    ("JOB_DEFAULT_LEASE_DURATION", I, "2400", "Claim lease for jobs that state none."),
    ("STARTER_UPDATE_INTERVAL", I, "300", "Seconds between the starter's job updates."),
    ("STARTER_INITIAL_UPDATE_INTERVAL", I, "8", "Seconds before the starter's first job update."),
    ("STARTER_UPLOAD_TIMEOUT", I, "300", "Seconds a call on the shadow's syscall connection (a job update, a Chirp call) may stall, sending or waiting for its answer, before the connection is taken as lost and closed (the shadow reconnects). 300 by default, as in HTCondor (param_info.in's default, which param_integer takes over the 200 written in some of condor_starter's calls), whose starter bounds both its syscall socket and its output transfer's socket with it; execd's output transfer does not use it. 0 or less: 300 here, where HTCondor's socket would have no timeout at all."),
    ("CGROUP_POLLING_INTERVAL", I, "5", "Seconds between reads of a job cgroup's usage."),
    ("MAX_DRAINING_ACTIVATION_DELAY", I, "20", "Seconds a claimed slot waits for activation while draining."),
)
_group(
    "Policy",
    ("START", E, "True", "Whether a slot is willing to start a job (evaluated against the job)."),
    ("IS_OWNER", E, "False", "Whether the slot belongs to its owner (Owner state); evaluated on the machine ad alone."),
    ("RANK", E, "0.0", "The slot's preference among jobs: a higher-ranked job preempts a lower one."),
    ("SUSPEND", E, "False", "When true for a running job, suspend it (if WANT_SUSPEND)."),
    ("CONTINUE", E, "True", "When true for a suspended job, resume it."),
    ("PREEMPT", E, "False", "When true, the running job is evicted (after retirement)."),
    ("KILL", E, "False", "When true while vacating, the job is hard-killed at once."),
    ("WANT_SUSPEND", E, "False", "Whether SUSPEND is consulted instead of PREEMPT."),
    ("WANT_VACATE", E, "True", "Whether an evicted job gets its soft kill signal (else it is hard-killed)."),
    ("WANT_HOLD", E, None, "When true at eviction, the job is put on hold (unset: never)."),
    ("WANT_HOLD_REASON", E, None, "Hold reason text when WANT_HOLD is true."),
    ("WANT_HOLD_SUBCODE", E, None, "Hold subcode when WANT_HOLD is true."),
    ("START_VANILLA", E, None, "START for vanilla-universe jobs, if set."),
    ("SUSPEND_VANILLA", E, None, "SUSPEND for vanilla-universe jobs, if set."),
    ("CONTINUE_VANILLA", E, None, "CONTINUE for vanilla-universe jobs, if set."),
    ("PREEMPT_VANILLA", E, None, "PREEMPT for vanilla-universe jobs, if set."),
    ("KILL_VANILLA", E, None, "KILL for vanilla-universe jobs, if set."),
    ("WANT_SUSPEND_VANILLA", E, None, "WANT_SUSPEND for vanilla-universe jobs, if set."),
    ("WANT_VACATE_VANILLA", E, None, "WANT_VACATE for vanilla-universe jobs, if set."),
    ("SLOT_WEIGHT", E, "Cpus", "The slot's weight, published as SlotWeight: what the negotiator charges a submitter for a claim of it (NEGOTIATOR_USE_SLOT_WEIGHTS)."),
    ("RUNBENCHMARKS", E, "LastBenchmark == 0", "When true in Unclaimed/Idle, run the Mips/KFlops benchmarks (Benchmarking); the default runs them once, the first time a slot is Unclaimed. use ROLE : Personal sets 0."),
    ("ENABLE_BACKFILL", B, "false", "Whether idle slots run backfill work."),
    ("BACKFILL_SYSTEM", S, "BOINC", "Names the one backfill client; <SYSTEM>_Executable, "
     "_Arguments, _InitialDir, _Owner (required as root), _Output, _Error, _Environment "
     "define it (any program). HTCondor has no default (with ENABLE_BACKFILL it logs an "
     "error and runs no backfill); execd's is BOINC, the one system HTCondor supports.", True),
    ("START_BACKFILL", E, "False", "When true in Unclaimed/Idle, enter Backfill."),
    ("EVICT_BACKFILL", E, "False", "When true in Backfill, kill the backfill client."),
    ("STARTER_EVICT", E, None, "Starter-enforced eviction expression (seed 002's proposal; not in HTCondor 25).", True),
    ("STARTER_WANT_VACATE", E, "True", "Whether a starter-enforced eviction gives the soft kill signal (seed 002).", True),
    ("STARTER_KILL", E, None, "Starter-enforced hard-kill expression (seed 002).", True),
    ("STARTD_LATCH_EXPRS", L, "", "Expressions whose value changes are latched into <name>Value/<name>Time."),
    ("SLOTS_CONNECTED_TO_KEYBOARD", I, "0", "How many slots see keyboard activity in KeyboardIdle."),
    ("SLOTS_CONNECTED_TO_CONSOLE", I, "0", "How many slots see console activity in ConsoleIdle."),
    ("CONSOLE_DEVICES", L, "mouse, console", "Devices under /dev whose access times count as console activity."),
    ("MINUTE", M, "60", "Seconds in a minute, for policy expressions."),
    ("HOUR", M, "3600", "Seconds in an hour."),
    ("StateTimer", M, "(time() - EnteredCurrentState)", "Seconds in the current state."),
    ("ActivityTimer", M, "(time() - EnteredCurrentActivity)", "Seconds in the current activity."),
    ("StartIdleTime", M, "15 * $(MINUTE)", "Keyboard idle time before a desktop starts jobs."),
    ("ContinueIdleTime", M, "5 * $(MINUTE)", "Keyboard idle time before a suspended job continues."),
    ("MaxSuspendTime", M, "10 * $(MINUTE)", "Longest suspension before a job is preempted."),
    ("MaxVacateTime", M, "10 * $(MINUTE)", "Default vacate time."),
    ("BackgroundLoad", M, "0.3", "Non-HTCondor load below which the CPU counts as idle."),
    ("HighLoad", M, "0.5", "Non-HTCondor load above which the CPU counts as busy."),
    ("SmallJob", M, "(TARGET.ImageSize <  (15 * 1024))", "A job small enough to suspend rather than evict."),
    ("VANILLA", M, "5", "The vanilla universe's number."),
    ("IsVanilla", M, "(TARGET.JobUniverse == $(VANILLA))", "The job is in the vanilla universe."),
)
_group(
    "Resources and slots",
    ("NUM_CPUS", I, "$(DETECTED_CPUS_LIMIT)", "CPUs to advertise (default: detected)."),
    ("DETECTED_CPUS_LIMIT", I, "$(DETECTED_CPUS)", "Cap on the detected CPU count."),
    ("COUNT_HYPERTHREAD_CPUS", B, "true", "Count hyperthreads as CPUs."),
    ("MEMORY", I, None, "Memory to advertise in MB (default: detected)."),
    ("RESERVED_MEMORY", I, "0", "MB of memory kept back from the slots."),
    ("RESERVED_DISK", I, "0", "MB of EXECUTE's free space kept back from the slots."),
    ("NUM_SLOTS", I, None, "Number of slots of type 0, each an even share of the machine, when no NUM_SLOTS_TYPE_<N> is set; unset: one if SLOT_TYPE_0_PARTITIONABLE, else one per CPU."),
    ("SLOT_TYPE_0_PARTITIONABLE", B, "true", "Whether the NUM_SLOTS slots of type 0 are partitionable (HTCondor 25's default) or static."),
    ("MAX_SLOT_TYPES", I, "10", "Highest slot type number looked for."),
    ("SLOT_TYPE_<N>", S, None, "Resources of slot type N: fractions, percents, absolute amounts or auto."),
    ("NUM_SLOTS_TYPE_<N>", I, None, "How many slots of type N."),
    ("SLOT_TYPE_<N>_PARTITIONABLE", B, "false", "Whether slots of type N are partitionable."),
    ("SLOT<N>_USER", S, None, "User that jobs in slot N run as when not as their owner."),
    ("MACHINE_RESOURCE_NAMES", L, None, "Custom resources to advertise."),
    ("MACHINE_RESOURCE_<name>", S, None, "Quantity (or list of ids) of custom resource <name>."),
    ("MACHINE_RESOURCE_INVENTORY_<name>", S, None, "Command whose output names the instances of custom resource <name>."),
    ("OFFLINE_MACHINE_RESOURCE_<name>", L, None, "Ids of resource <name> (GPUs, or a MACHINE_RESOURCE_<name> id list or inventory) taken offline: given to no slot, not counted in <name>, Total<name> (nor Detected<name> of a configured list), and published as Offline<name> in every slot ad. Read when execd starts: a reload that changes it logs reconfig_needs_restart (condor_startd applies it at reconfig)."),
    ("STARTD_DETECT_GPUS", S, "-properties $(GPU_DISCOVERY_EXTRA)", "Arguments of `$(LIBEXEC)/condor_gpu_discovery`, run as the GPUs inventory when neither MACHINE_RESOURCE_GPUs nor MACHINE_RESOURCE_INVENTORY_GPUs is defined (without the program: NVML). `false`, `0` or empty: no GPU discovery, and no GPUs resource at all; `true` or `1` is a configuration error, logged, and no discovery."),
    ("MODIFY_REQUEST_EXPR_REQUESTCPUS", E, "quantize(RequestCpus,{1})", "How a job's CPU request is rounded for a dynamic slot."),
    ("MODIFY_REQUEST_EXPR_REQUESTMEMORY", E, "quantize(RequestMemory,{128})", "How a job's memory request is rounded for a dynamic slot."),
    ("MODIFY_REQUEST_EXPR_REQUESTDISK", E, "quantize(RequestDisk - $(CATALOG_SPACE),{Target.DiskQuantum?:1024})", "How a job's disk request is rounded for a dynamic slot: evaluated with the job as MY and the partitionable slot as TARGET (a DiskQuantum in the slot ad, e.g. from STARTD_ATTRS, replaces 1024)."),
    ("SUM_OF_CATALOGS", M, 'ifthenelse(RequestedCatalogs is undefined || catalogs is undefined, 0, sum(evalInEachContext(member(CatalogID, RequestedCatalogIDs) ? CatalogSize : 0, catalogs)))', "Disk of the job's requested catalogs (execd has none: 0)."),
    ("CATALOG_SPACE", M, 'ifthenelse(MappingMethod ?: "" != "Copy", $(SUM_OF_CATALOGS), 0)', "Disk of catalogs a job's request need not cover."),
    ("STARTD_ATTRS", L, "", "Config names whose values are published in every slot ad."),
    ("SLOT<N>_STARTD_ATTRS", L, None, "STARTD_ATTRS for slot N only."),
    ("SYSTEM_STARTD_ATTRS", L, "COLLECTOR_HOST_STRING DedicatedScheduler", "Config names HTCondor itself publishes in every slot ad, read as STARTD_ATTRS (after it: the same name takes this list's value); an undefined or empty name is left out."),
    ("COLLECTOR_HOST_STRING", S, '"$(COLLECTOR_HOST)"', "COLLECTOR_HOST as a ClassAd string, published by SYSTEM_STARTD_ATTRS (a job's $$(COLLECTOR_HOST_STRING) becomes the pool's collector)."),
    ("STARTD_SLOT_ATTRS", L, "", "Attributes of each slot cross-posted into every other slot's ad (slot2_State)."),
    ("STARTD_JOB_ATTRS", L, "", "Job attributes copied from the claim's job ad into a Claimed or Preempting slot's ad (pool mode), besides those HTCondor always copies (ImageSize, MemoryUsage, DiskUsage, ...)."),
    ("ADVERTISE_PSLOT_ROLLUP_INFORMATION", B, "true", "Whether a partitionable slot publishes PslotRollupInformation and the Child<Attr> lists of its dynamic slots' values (NumDynamicSlots is published either way)."),
    ("STARTD_PARTITIONABLE_SLOT_ATTRS", L, "", "Attributes of the dynamic slots rolled up into their partitionable slot's ad as Child<Attr> lists, besides Name, DSlotId, CurrentRank, RemoteUser, RemoteOwner, AccountingGroup, State, Activity, EnteredCurrentState, RetirementTimeRemaining, Cpus, Memory, Disk and the machine resources."),
    ("WithinResourceLimits", E, None, "Replaces the WithinResourceLimits expression execd builds for every slot ad (pool mode), which the slot's Requirements (Start && WithinResourceLimits) use; unset: CPUs, memory, disk and a term per other machine resource. condor_startd reads this name (the attribute's, like START); there is no WITHIN_RESOURCE_LIMITS knob."),
    ("STARTD_JOB_HAS_REQUEST_ATTRS", B, "false", "Build WithinResourceLimits with the job's _condor_Request<Res> attributes, which override its Request<Res> (HTCondor's pre-9.x form; a job without RequestCpus asks for one CPU, one without RequestMemory or RequestDisk matches nothing)."),
    ("STARTD_NAME", S, "", "Name of this execute point (slots are slotN@STARTD_NAME)."),
)
_group(
    "Jobs, starter and cgroups",
    ("STARTER_ALLOW_RUNAS_OWNER", B, "true", "Run jobs as their Owner when that user exists."),
    ("ENVIRONMENT_FOR_Assigned<name>", S, None, "Job environment variables for the ids of resource <name> assigned to its slot: NAME alone, or NAME=/regex/replacement/ applied to each id (several, space separated)."),
    ("ENVIRONMENT_FOR_AssignedGPUs", S, "GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//", "ENVIRONMENT_FOR_Assigned<name> for GPUs."),
    ("ENVIRONMENT_VALUE_FOR_UnAssigned<name>", S, None, "The ids ENVIRONMENT_FOR_Assigned<name> and _CONDOR_Assigned<name> get when the slot has none of resource <name>."),
    ("ENVIRONMENT_VALUE_FOR_UnAssignedGPUs", S, "10000", "ENVIRONMENT_VALUE_FOR_UnAssigned<name> for GPUs."),
    ("AUTO_SET_NVIDIA_VISIBLE_DEVICES", B, "true", "Set NVIDIA_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES) to GPU-<DeviceUuid> of the slot's GPUs, or none."),
    ("STARTER_NUM_THREADS_ENV_VARS", L, "CUBACORES GOMAXPROCS JULIA_NUM_THREADS MKL_NUM_THREADS NUMEXPR_NUM_THREADS OMP_NUM_THREADS OMP_THREAD_LIMIT OPENBLAS_NUM_THREADS PYTHON_CPU_COUNT ROOT_MAX_THREADS TF_LOOP_PARALLEL_ITERATIONS TF_NUM_THREADS", "Environment variables set to the job's number of CPUs (at least 1)."),
    ("USE_PID_NAMESPACES", B, "false", "Run each job in its own PID namespace: as with condor_pid_ns_init, the job is pid 2 under a small init (pid 1) that forwards signals and reaps, and /proc shows only the job's processes. Needs root."),
    ("BASE_CGROUP", S, "htcondor", "cgroup subtree execd owns; jobs get <slot>.slice below it."),
    ("CGROUP_MEMORY_LIMIT_POLICY", S, "hard", "hard, soft, none or custom: how memory.max is set."),
    ("CGROUP_HARD_MEMORY_LIMIT_EXPR", E, None, "memory.max in MB with CGROUP_MEMORY_LIMIT_POLICY = custom."),
    ("CGROUP_LOW_MEMORY_LIMIT", E, None, "memory.low in MB."),
    ("CGROUP_USE_PEAK_MEMORY", B, "false", "Measure a job's memory (ResidentSetSize, ImageSize) from its cgroup's memory.peak rather than memory.stat's anon + shmem, as condor_starter does. Read as each job starts."),
    ("CGROUP_IGNORE_CACHE_MEMORY", B, "true", "With CGROUP_USE_PEAK_MEMORY, subtract memory.stat's file and inactive_anon from memory.peak (page cache is not the job's memory). Read as each job starts."),
    ("DISABLE_SWAP_FOR_JOB", B, "true", "Set memory.swap.max = 0 for jobs."),
    ("STARTER_ALWAYS_HOLD_ON_OOM", B, "true", "Hold an OOM-killed job even when it was under 90% of its limit."),
    ("STARTER_HIDE_GPU_DEVICES", B, "true", "Deny each job the NVIDIA GPUs of the node that are not its slot's: a BPF device program on the job's cgroup makes opening their /dev/nvidia<N> fail with EPERM whatever the file permissions (nvidia-smi does not list them). Needs root and cgroup BPF; where it cannot be applied the job runs anyway and the starter log and the daemon's log say so."),
    ("ENABLE_PEEK_JOB", E, "True", "Whether condor_tail may read a running job's files (STARTER_PEEK): true, false, or a ClassAd expression over the slot's ad (MY) and the job's (TARGET); one that is not a boolean counts as true. False refuses with condor_starter's 'Rejecting request, because ENABLE_PEEK_JOB=false'."),
    ("ENABLE_SSH_TO_JOB", E, "True", "Whether condor_ssh_to_job may start an sshd in a running job (START_SSHD): true, false, or a ClassAd expression over the slot's ad (MY) and the job's (TARGET); one that is not a boolean counts as true. False refuses with condor_starter's 'Rejecting request, because ENABLE_SSH_TO_JOB=false'."),
    ("SSH_TO_JOB_SSHD", P, "/usr/sbin/sshd", "The sshd condor_ssh_to_job's sessions run (as the job's user, in the job's slice), read at each request; one that cannot be executed is named in the refusal."),
    ("SSH_TO_JOB_SSHD_ARGS", S, '"-i -e -f %f"', "sshd's arguments in double quotes (HTCondor's V2 syntax inside); %f is the session's sshd_config, %% a percent sign. The connection is sshd's stdin and stdout."),
    ("SSH_TO_JOB_SSHD_CONFIG_TEMPLATE", P, None, "The sshd_config template condor_ssh_to_job_sshd_setup fills in (HTCondor's file); unset: $(LIB)/condor_ssh_to_job_sshd_config_template, as condor_starter."),
    ("SSH_TO_JOB_SSH_KEYGEN", P, "/usr/bin/ssh-keygen", "The ssh-keygen that makes each session's key."),
    ("SSH_TO_JOB_SSH_KEYGEN_ARGS", S, '"-N \'\' -C \'\' -q -f %f -t rsa"', "ssh-keygen's arguments in double quotes (V2 syntax inside); %f is the key file. condor_ssh_to_job's -keygen-options are appended."),
    ("CONDOR_SSH_TO_JOB_FAKE_PASSWD_ENTRY", B, "true", "Preload $(LIB)/libgetpwnam.so (HTCondor's, where installed) into condor_ssh_to_job's setup and sshd, so that sshd sees the job's user with no password lock, the sandbox as home and the preferred shell: needed where jobs run as a user sshd would refuse (nobody)."),
    ("ENABLE_CHIRP", B, "true", "Whether jobs may use condor_chirp at all: false gives no job a Chirp proxy or .chirp.config (nor do ENABLE_CHIRP_IO, ENABLE_CHIRP_UPDATES and ENABLE_CHIRP_DELAYED all false). Read as each job starts."),
    ("ENABLE_CHIRP_IO", B, "true", "Whether a job with WantIOProxy = true may use condor_chirp's file I/O; false also denies updates to a job that asked for them only through WantIOProxy. Read as each job starts."),
    ("ENABLE_CHIRP_UPDATES", B, "true", "Whether a job with WantRemoteUpdates (else WantIOProxy) = true may use condor_chirp set_job_attr, get_job_attr, ulog and version. Read as each job starts."),
    ("ENABLE_CHIRP_DELAYED", B, "true", "Whether jobs (unless WantDelayedUpdates = false) may use condor_chirp set_job_attr_delayed and get_job_attr_delayed. Read as each job starts."),
    ("CHIRP_DELAYED_UPDATE_PREFIX", S, "Chirp*", "The attribute names condor_chirp set_job_attr_delayed may set: names with at most one * wildcard, any case, separated by commas or spaces. Also the job's _CHIRP_DELAYED_UPDATE_PREFIX. Read as each job starts (the shadow checks the names again with its own value)."),
    ("CHIRP_DELAYED_UPDATE_MAX_ATTRS", I, "100", "The most different attribute names one job may set with condor_chirp set_job_attr_delayed. Read as each job starts."),
    ("JOB_RENICE_INCREMENT", I, "0", "Nice value added to jobs."),
    ("STARTER_JOB_HOOK_KEYWORD", S, "", "Hook keyword for every job (job hooks)."),
    ("STARTER_DEFAULT_JOB_HOOK_KEYWORD", S, "", "Hook keyword for jobs that name none."),
    ("STARTD_JOB_HOOK_KEYWORD", S, "", "Hook keyword for fetch-work hooks."),
    ("SLOT<N>_JOB_HOOK_KEYWORD", S, None, "Fetch-work hook keyword for slot N."),
    ("FetchWorkDelay", E, "300", "Seconds between fetch-work hook invocations for a slot."),
)
_group(
    "Startd cron",
    ("STARTD_CRON_JOBLIST", L, "", "Names of daemon ClassAd hook jobs."),
    ("STARTD_CRON_MAX_JOB_LOAD", F, "0.1", "Total load the cron jobs may put on the machine."),
    ("STARTD_CRON_AUTOPUBLISH", S, "", "Publish slot ads when cron output changes: Never, Always or If_Changed."),
    ("STARTD_CRON_LOG_NON_ZERO_EXIT", B, "false", "Log a cron job's stderr when it exits non-zero."),
    ("STARTD_CRON_<name>_EXECUTABLE", P, None, "Program cron job <name> runs."),
    ("STARTD_CRON_<name>_MODE", S, "Periodic", "Periodic, WaitForExit, OneShot or OnDemand."),
    ("STARTD_CRON_<name>_PERIOD", S, None, "Seconds between runs (suffix s, m or h); for WaitForExit, the delay after each exit."),
    ("STARTD_CRON_<name>_ARGS", S, "", "Arguments (shell-like quoting)."),
    ("STARTD_CRON_<name>_ENV", S, "", "Environment added for the job: \"A=1 B=2\" or A=1;B=2."),
    ("STARTD_CRON_<name>_CWD", P, None, "Working directory of the job."),
    ("STARTD_CRON_<name>_PREFIX", S, "", "Prefix added to every attribute name the job publishes (and to LastUpdate)."),
    ("STARTD_CRON_<name>_KILL", B, "false", "Periodic: start the next run at once after killing a run that outlived its period."),
    ("STARTD_CRON_<name>_RECONFIG", B, "false", "Send the running job SIGHUP on reconfig."),
    ("STARTD_CRON_<name>_RECONFIG_RERUN", B, "false", "OneShot: run again on reconfig."),
    ("STARTD_CRON_<name>_JOB_LOAD", F, "0.01", "Load the job counts for against STARTD_CRON_MAX_JOB_LOAD."),
    ("STARTD_CRON_<name>_CONDITION", E, None, "Run the job only while this is true of the machine ad."),
    ("STARTD_CRON_<name>_SLOTS", L, "", "Slot ids that receive the job's output (empty: all)."),
    ("STARTD_CRON_<name>_METRICS", L, "", "SUM:<R> / PEAK:<R>: publish Uptime<R>Seconds summed and Uptime<R>PeakUsage maxed over runs."),
)
_group(
    "Pool",
    ("CONDOR_HOST", S, None, "The central manager; execd joins that pool when set."),
    ("COLLECTOR_HOST", S, "$(CONDOR_HOST)", "Collector address(es)."),
    ("SEC_TOKEN_DIRECTORY", P, "", "Directory of IDTOKENS this node presents."),
    ("EXECD_POOL_TOKEN_FILE", P, "", "IDTOKEN (from condor_token_create) execd presents to the pool; empty: the first file in SEC_TOKEN_DIRECTORY, else FS only (same host).", True),
    ("TRUST_DOMAIN", S, "$(UID_DOMAIN)", "The pool's trust domain: the issuer (iss) of its IDTOKENS; execd accepts tokens of this issuer only."),
    ("SEC_PASSWORD_DIRECTORY", P, "$(ETC)/passwords.d", "Directory of the pool's token signing keys (file name = key id)."),
    ("SEC_TOKEN_POOL_SIGNING_KEY_FILE", P, "$(SEC_PASSWORD_DIRECTORY)/POOL", "The POOL signing key: execd verifies IDTOKENS signed with it (readable by execd, e.g. root-only)."),
    ("SEC_TOKEN_MAX_AGE", I, None, "Seconds after its issue (iat) a token is no longer accepted; unset: no limit."),
    ("SEC_TOKEN_REVOCATION_EXPR", E, None, "Evaluated against a presented token's claims (sub, iss, jti, iat, exp, ...): true, or not boolean-like, refuses the token."),
    ("SEC_TOKEN_BLACKLIST_EXPR", E, None, "The old name of SEC_TOKEN_REVOCATION_EXPR, read when that is unset."),
    ("EXECD_SHARED_PORT", S, "", "host:port of this host's condor_shared_port: execd becomes its endpoint EXECD_SHARED_PORT_ID and advertises that address (empty: execd's own port).", True),
    ("EXECD_SHARED_PORT_ID", S, "execd", "execd's endpoint name behind the shared port (the sock= of its address).", True),
    ("DAEMON_SOCKET_DIR", S, "auto", "Directory where the shared port finds its endpoints' Unix sockets (HTCondor's file fallback); auto: $(LOCK)/daemon_sock, as in HTCondor."),
    ("EXECD_COMMAND_ADDRESS", S, "127.0.0.1:0", "host:port where execd serves the pool's startd commands (its MyAddress); port 0 lets the kernel pick.", True),
    ("EXECD_POOL_ADMINISTRATORS", L, "root@* condor@*", "Deprecated: the default of ALLOW_ADMINISTRATOR (identities, user@domain patterns that never name a host, allowed to drain, vacate, reconfig and shut down execd from the pool); read only when neither ALLOW_ADMINISTRATOR_STARTD, ALLOW_ADMINISTRATOR nor ALLOW_DEFAULT (nor their _STARTD forms) is defined, even empty.", True),
    ("EXECD_POOL_SCHEDULERS", L, "condor@*", "Deprecated: the default of ALLOW_DAEMON (identities besides a claim id's holder allowed to send claim commands: the pool's schedd and negotiator); read only when neither ALLOW_DAEMON_STARTD, ALLOW_DAEMON nor ALLOW_DEFAULT (nor its _STARTD form) is defined, even empty; user@domain patterns that never name a host.", True),
    ("ALLOW_READ", L, None, "Who may send READ commands (condor_status -direct, condor_history -startd, condor_config_val -startd): user@domain/host entries (docs/pool.md, Authorization). With no READ list defined at all execd allows everyone (*, as security:recommended)."),
    ("ALLOW_WRITE", L, None, "Who may send WRITE commands; WRITE implies READ. With no WRITE list defined at all execd allows everyone (*, as security:recommended)."),
    ("ALLOW_ADMINISTRATOR", L, None, "Who may send ADMINISTRATOR commands (condor_drain, condor_vacate, condor_reconfig, condor_restart); implies WRITE and READ. With no ADMINISTRATOR list defined at all: EXECD_POOL_ADMINISTRATORS."),
    ("ALLOW_DAEMON", L, None, "Who besides a claim id's holder may send claim commands (DAEMON); implies WRITE and READ. With no DAEMON list defined at all: EXECD_POOL_SCHEDULERS."),
    ("ALLOW_NEGOTIATOR", L, None, "Who may send NEGOTIATOR commands (none reach execd today); implies READ. With no NEGOTIATOR list defined at all: condor@* condor@password (security:recommended)."),
    ("ALLOW_CONFIG", L, None, "Who may send CONFIG commands (execd serves none); implies READ."),
    ("ALLOW_DEFAULT", L, None, "The ALLOW list of a level whose own ALLOW_<LEVEL> is undefined."),
    ("DENY_READ", L, None, "Entries refused READ (and so every READ command), whatever an ALLOW list says."),
    ("DENY_WRITE", L, None, "Entries refused WRITE."),
    ("DENY_ADMINISTRATOR", L, None, "Entries refused ADMINISTRATOR."),
    ("DENY_DAEMON", L, None, "Entries refused DAEMON."),
    ("DENY_NEGOTIATOR", L, None, "Entries refused NEGOTIATOR."),
    ("DENY_CONFIG", L, None, "Entries refused CONFIG."),
    ("DENY_DEFAULT", L, None, "The DENY list of a level whose own DENY_<LEVEL> is undefined."),
    ("ALLOW_<NAME>_STARTD", L, None, "A level's ALLOW list for the startd (execd) alone: read before ALLOW_<LEVEL>."),
    ("DENY_<NAME>_STARTD", L, None, "A level's DENY list for the startd (execd) alone: read before DENY_<LEVEL>."),
    ("LEGACY_ALLOW_SEMANTICS", B, None, "False when unset. When true, an undefined ALLOW_DAEMON/DENY_DAEMON (and so ADVERTISE_*) falls back to the WRITE lists (HTCondor's host-based security)."),
    ("USE_POOL_USERNAME_EQUIVALENT", B, "true", "An ALLOW_/DENY_ entry (or EXECD_POOL_ADMINISTRATORS/SCHEDULERS pattern) naming condor@x names condor_pool@x too, and the other way round."),
    ("HOST_ALIAS", S, "$(FULL_HOSTNAME)", "The host name in execd's address (its alias=), which clients check an SSL host certificate against and record authenticated hosts under; empty: none."),
    ("ENABLE_STARTD_DAEMON_AD", S, "auto", "Whether execd sends the collector a StartD daemon ad besides its slot ads (and says HasStartDaemonAd = true in them): true, false, or auto (unless the collector is known to be older than 23.2)."),
    ("FILESYSTEM_DOMAIN", S, "$(FULL_HOSTNAME)", "Name shared by machines with the same file systems."),
    ("UID_DOMAIN", S, "$(FULL_HOSTNAME)", "Name shared by machines with the same users."),
    ("NETWORK_HOSTNAME", S, None, "The node's name (FULL_HOSTNAME, Machine, the slots' Names); unset: the canonical name of the kernel's host name, by forward lookup (/etc/hosts, DNS). Read when execd starts."),
    ("DEFAULT_DOMAIN_NAME", S, None, "Domain appended to a host name without a dot: the node's own (FULL_HOSTNAME, Machine, the slots' Names; read when execd starts) and a claim's ClientMachine."),
    ("NO_DNS", B, "false", "Use no DNS: a peer's host name (a claim's ClientMachine) is its address with dashes in DEFAULT_DOMAIN_NAME."),
    ("DAEMON_LIST", L, "MASTER", "Daemons a condor_master starts (read for compatibility)."),
    ("IS_LOCAL_STARTD", B, "false", "Published as IsLocalStartd on every slot ad (a startd run by a schedd for its local universe says true)."),
    ("UNHIBERNATE", E, None, "Published as Unhibernate (when condor_rooster would wake the machine); unset: MY.MachineLastMatchTime =!= UNDEFINED. execd never hibernates."),
    ("STATISTICS_WINDOW_SECONDS", I, "1200", "The window of the daemon's Recent* self statistics (RecentDaemonCoreDutyCycle); the startd's counters keep their fixed 20 minutes."),
    ("HISTORY", S, "$(SPOOL)/history", "The schedd's job history file: read by a remote history query that names no record source (as condor_startd reads it)."),
    ("JOB_EPOCH_HISTORY", S, "$(SPOOL)/epoch_history", "The schedd's job epoch history file: read by a remote history query whose record source is JOB_EPOCH (as condor_startd reads it)."),
    ("HISTORY_HELPER_MAX_CONCURRENCY", I, "50", "Remote history queries (condor_history -startd -name) read at once, as in HTCondor; execd reads at most 4 at once whatever this says, and lets 16 more wait (60 s at most). 0 disables remote history: a query gets error 10."),
    ("HISTORY_HELPER_MAX_HISTORY", I, "2000000000", "Records a remote history query reads at most unless it sets its own -scanlimit."),
    ("STATISTICS_WINDOW_QUANTUM", I, "240", "Seconds between self-monitor samples (MonitorSelf*) and the quantum of the recent window."),
)
_group(
    "File transfer plugins",
    ("FILETRANSFER_PLUGINS", L, "$(LIBEXEC)/curl_plugin, $(LIBEXEC)/data_plugin, $(LIBEXEC)/box_plugin.py, $(LIBEXEC)/gdrive_plugin.py, $(LIBEXEC)/onedrive_plugin.py, $(LIBEXEC)/stash_plugin", "Programs that fetch a job's URL input files (`transfer_input_files = https://...`). Each is asked `-classad` what it does when execd joins the pool; the slot ads advertise their methods as HasFileTransferPluginMethods. One that cannot be run or names no SupportedMethods is logged and left out. Run as the job's user in its sandbox (docs/pool.md, URL input files)."),
    ("ENABLE_URL_TRANSFERS", B, "true", "False: no plugin is asked or run; the slot ads advertise no methods and a URL input file holds its job."),
    ("MAX_FILE_TRANSFER_PLUGIN_LIFETIME", I, "72000", "Seconds one plugin run may take; past them its session is killed and the job held (code 12, subcode ETIME)."),
    ("STARTER_DISABLE_USER_SUPPLIED_TRANSFER_PLUGINS", E, "", "The job's own transfer plugins (TransferPlugins): unset, false or <= 0 allows them; 2 ignores them (the node's plugins serve their methods); any other value (true) refuses them, holding with subcode -1002 'user-supplied plugin P not allowed'. A ClassAd expression over the slot's ad (MY) and the job's (TARGET). Where execd has no delegated cgroup tree they are refused whatever it says. Set, it is advertised as HasDisableUserTransferPlugins."),
    ("FILETRANSFER_PLUGIN_CLASSAD_TIMEOUT", I, "20", "Seconds a plugin's `-classad` answer may take; past them the plugin is left out."),
)


@cache
def registry() -> dict[str, Knob]:
    """Plain knobs by upper-case name."""
    return {k.name.upper(): k for k in _KNOBS if not k.is_pattern}


@cache
def patterns() -> tuple[Knob, ...]:
    return tuple(k for k in _KNOBS if k.is_pattern)


def all_knobs() -> list[Knob]:
    return list(_KNOBS)


def find_knob(name: str) -> Knob | None:
    """The declaration for NAME (a plain knob, or a family it belongs to)."""
    key = name.upper()
    if "." in key:
        key = key.rsplit(".", 1)[1]
    plain = registry().get(key)
    if plain is not None:
        return plain
    for knob in patterns():
        if knob.regex.match(key):
            return knob
    # per-slot spellings of plain knobs: SLOT2_START, SLOT_TYPE_1_START
    bare = re.sub(r"^(SLOT_TYPE_\d+_|SLOT\d+_)", "", key)
    return registry().get(bare) if bare != key else None


def default_text(name: str) -> str | None:
    knob = registry().get(name.upper())
    return knob.default if knob is not None else None
