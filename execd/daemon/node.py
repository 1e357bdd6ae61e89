"""The node as the daemon holds it: configuration, detected facts, slots and their ads.

Built in one go from a Config (so a reload can build a new one, compare, and swap),
and refreshed on every update: load, idle times and the policy facts of each slot.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execd.config.loader import Config
from execd.config.settings import Settings
from execd.errors import ConfigError
from execd.machine.detect import detect_machine
from execd.machine.facts import MachineLoad
from execd.machine.idle import detect_idle
from execd.machine.load import JobLoadMeter, SlotLoadInput, read_total_load_avg, split_load
from execd.machine.reader import HostReader, LiveHostReader
from execd.slots import from_config
from execd.slots.ads import PolicyFacts
from execd.slots.layout import SlotTypeInput, build_layout
from execd.slots.node import NodeSlots


@dataclass(frozen=True)
class Paths:
    execute: Path
    spool: Path
    log: Path
    run: Path

    @property
    def socket(self) -> Path:
        return self.run / "execd.sock"

    @property
    def pidfile(self) -> Path:
        return self.run / "execd.pid"

    @staticmethod
    def from_settings(settings: Settings) -> Paths:
        def path(name: str) -> Path:
            value = settings.get_str(name)
            if not value:
                raise ConfigError(f"{name} is not set")
            return Path(value)

        return Paths(path("EXECUTE"), path("SPOOL"), path("LOG"), path("RUN"))

    def create(self) -> None:
        """Make the directories execd writes; an unusable one is named in the error."""
        for name, directory, mode in (
            ("EXECUTE", self.execute, 0o755),
            ("SPOOL", self.spool, 0o700),
            ("LOG", self.log, 0o755),
            ("RUN", self.run, 0o755),
        ):
            try:
                directory.mkdir(parents=True, exist_ok=True, mode=mode)
            except OSError as exc:
                reason = exc.strerror
                raise ConfigError(f"cannot create {name} directory {directory}: {reason}") from None
            if not _writable(directory):
                raise ConfigError(f"{name} directory {directory} is not writable by execd")


    def execute_problem(self, condor_uid: int | None = None) -> str | None:
        """What is wrong with EXECUTE's owner and mode, as condor_startd checks them at
        startup (check_execute_dir_perms), or None. The owner may be root, execd's own
        user or the condor account (condor_uid: a node that ran condor_startd has
        condor:condor EXECUTE); the mode must be 0755. Both problems are named together.
        Logged, not refused, as condor_startd does where it makes the sandboxes itself."""
        import os  # noqa: PLC0415  (kept local: this module is otherwise pure data flow)

        st = os.stat(self.execute)
        problems = []
        owners = {0, os.geteuid()} | ({condor_uid} if condor_uid is not None else set())
        if st.st_uid not in owners:
            problems.append(f"owned by uid {st.st_uid}, not root, execd's or condor's"
                            f" ({', '.join(str(uid) for uid in sorted(owners))})")  # fmt: skip
        mode = st.st_mode & 0o7777
        if mode != 0o755:
            problems.append(f"mode {mode:04o}, not 0755")
        if mode & 0o022:
            problems.append("jobs could put another directory or a link in place of a sandbox")
        return "; ".join(problems) or None


def condor_uid(settings: Settings) -> int | None:
    """The condor account's uid, as HTCondor resolves it: CONDOR_IDS (uid.gid), else the
    user named condor; None where there is neither (execd's own install needs none)."""
    import pwd  # noqa: PLC0415  (kept local: this module is otherwise pure data flow)

    ids = settings.get_str("CONDOR_IDS")
    if ids:
        uid, _, _ = ids.partition(".")
        try:
            return int(uid)
        except ValueError:
            return None
    try:
        return pwd.getpwnam("condor").pw_uid
    except KeyError:
        return None


def _writable(directory: Path) -> bool:
    import os  # noqa: PLC0415  (kept local: this module is otherwise pure data flow)

    return os.access(directory, os.W_OK | os.X_OK)


@dataclass
class Node:
    config: Config
    settings: Settings
    slots: NodeSlots
    slot_types: list[SlotTypeInput]
    reader: HostReader = field(default_factory=LiveHostReader)
    load: MachineLoad = field(default_factory=MachineLoad)
    # Every slot ad carries these (who enforces each cgroup limit: CgroupEnforcement).
    node_attrs: dict[str, Any] = field(default_factory=dict)
    # Slots whose job cgroup could not be emptied -> SlotBrokenReason.
    broken: dict[str, str] = field(default_factory=dict)
    # Told of each new mark (the daemon keeps it in its store: a restart restores it).
    on_broken: Callable[[str, str], None] | None = None
    job_load: JobLoadMeter = field(default_factory=JobLoadMeter)

    @staticmethod
    def build(config: Config, settings: Settings, reader: HostReader | None = None) -> Node:
        reader = reader or LiveHostReader()
        params = from_config.detection_params(config, config.names())
        facts = detect_machine(reader, params)
        slot_types = from_config.slot_type_inputs(config)
        slots = NodeSlots(facts, build_layout(slot_types, facts))
        return Node(config, settings, slots, slot_types, reader)

    def refresh_load(self, now: float, job_cpu_usec: Mapping[str, int] | None = None) -> None:
        """Sample the machine's load and idle times, and each running job's CPU use."""
        idle = detect_idle(self.reader, since=now)
        self.job_load.sample(time.monotonic(), job_cpu_usec or {})
        self.load = MachineLoad(
            total_load_avg=read_total_load_avg(self.reader),
            total_condor_load_avg=round(sum(self.job_load.loads().values()), 3),
            keyboard_idle=idle.keyboard_idle,
            console_idle=idle.console_idle,
        )

    def mark_broken(self, slot: str, reason: str) -> None:
        """A d-slot's reason also goes on its partitionable parent, which outlives it."""
        marks = {slot: reason}
        parent = slot.split("_", maxsplit=1)[0]
        if parent != slot and parent not in self.broken:
            marks[parent] = f"{slot}: {reason}"
        for name, why in marks.items():
            if self.broken.get(name) != why:
                self.broken[name] = why
                if self.on_broken is not None:
                    self.on_broken(name, why)

    def ads(self, policy_for: Callable[[str], PolicyFacts] | None = None) -> list[Any]:
        now = int(time.time())
        if policy_for is None:
            idle = {d.name: from_config.idle_policy(self.config, d.slot_id, now)
                    for d in self.slots.definitions}

            def policy_for(name: str) -> PolicyFacts:
                return idle[name.split("_", maxsplit=1)[0]]

        condor = self.job_load.loads()
        loads = [SlotLoadInput(res.name, condor.get(res.name, 0.0))
                 for res in self.slots.resources()]
        ads = self.slots.build_ads(
            now=now,
            machine_load=self.load,
            load_for=split_load(self.load.total_load_avg, loads),
            condor_load_for=condor,
            policy_for=policy_for,
            startd_attrs_for=lambda slot_id: from_config.startd_attrs(self.config, slot_id),
            slot_attrs=from_config.startd_slot_attrs(self.config),
        )
        for ad in ads:
            ad.update(self.node_attrs)
            reason = self.broken.get(str(ad["Name"]).split("@")[0])
            if reason:
                ad["SlotBrokenReason"] = reason
        return ads
