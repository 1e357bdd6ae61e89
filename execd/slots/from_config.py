"""Glue: configuration values -> detection parameters, slot types, ad inputs.

The only slots/machine module that knows about configuration, and it only needs
``get(name, subsystem=..., slot=..., slot_type=...) -> str | None`` (execd.config's
Config has it), so layout, carving and ads stay free of the config language.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable
from typing import Protocol

from execd.config.settings import parse_bool
from execd.errors import ConfigError
from execd.log import get_logger
from execd.machine.detect import DEFAULT_DETECT_GPUS, DEFAULT_LIBEXEC, DetectionParams
from execd.slots.ads import PolicyFacts
from execd.slots.layout import SlotTypeInput, default_slot_types
from execd.slots.rollup import RollupSettings

log = get_logger(__name__)

MAX_SLOT_TYPES_DEFAULT = 10  # HTCondor's MAX_SLOT_TYPES
DEFAULT_EXECUTE = "/var/lib/execd/execute"
OFFLINE = "OFFLINE_MACHINE_RESOURCE_"
GPU_RESOURCE_KNOBS = ("MACHINE_RESOURCE_GPUS", "MACHINE_RESOURCE_INVENTORY_GPUS")


class ConfigLookup(Protocol):
    def get(
        self,
        name: str,
        subsystem: str = "STARTD",
        slot: int | None = None,
        slot_type: int | None = None,
    ) -> str | None: ...


def _text(config: ConfigLookup, name: str, **kw: int | None) -> str | None:
    value = config.get(name, "STARTD", **kw)
    if value is None or not value.strip():
        return None
    return value.strip()


def _number(config: ConfigLookup, name: str, *, integer: bool = True) -> float | None:
    text = _text(config, name)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{name} = {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} = {text!r} must be a non-negative number")
    if integer and not value.is_integer():
        raise ConfigError(f"{name} = {text!r} must be a whole number")
    return value


def _bool(config: ConfigLookup, name: str, default: bool) -> bool:
    text = _text(config, name)
    if text is None:
        return default
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise ConfigError(f"{name} = {text!r} is not True or False")


def _setting_bool(config: ConfigLookup, name: str, default: bool) -> bool:
    """A boolean as the knob registry validates it (true/false, yes/no, on/off, an
    expression), for knobs that only ever had that reading."""
    text = _text(config, name)
    if text is None:
        return default
    try:
        return parse_bool(text)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _list(text: str | None) -> list[str]:
    return [p for p in (text or "").replace(",", " ").split() if p]


def gpu_discovery(config: ConfigLookup) -> str | None:
    """The command condor_startd 25.x runs to detect GPUs where no GPUs resource is
    configured: ``$(LIBEXEC)/condor_gpu_discovery $(STARTD_DETECT_GPUS)``. None: no
    discovery, for STARTD_DETECT_GPUS = false, 0 or empty, and for true or 1, which
    condor_startd logs as an invalid configuration (so does execd, naming the knob)."""
    value = config.get("STARTD_DETECT_GPUS", "STARTD")
    args = (DEFAULT_DETECT_GPUS if value is None else value).strip()  # None: a bare lookup
    if not args or args.lower() == "false" or args == "0":
        return None
    if args.lower() == "true" or args == "1":
        log.error("config_invalid", knob="STARTD_DETECT_GPUS", value=args,
                  error="STARTD_DETECT_GPUS holds condor_gpu_discovery's arguments "
                        "(default: -properties $(GPU_DISCOVERY_EXTRA)); false, 0 or empty "
                        "turn GPU discovery off", consequence="no GPU discovery")  # fmt: skip
        return None
    libexec = _text(config, "LIBEXEC") or DEFAULT_LIBEXEC
    return f"{shlex.quote(libexec + '/condor_gpu_discovery')} {args}"


def detection_params(
    config: ConfigLookup, defined_names: Iterable[str] = (), hostname: str | None = None
) -> DetectionParams:
    """``defined_names``: every name the config defines, to find MACHINE_RESOURCE_<name>."""
    resources: dict[str, str] = {}
    inventories: dict[str, str] = {}
    offline: dict[str, tuple[str, ...]] = {}
    wanted = {n.lower() for n in _list(_text(config, "MACHINE_RESOURCE_NAMES"))}
    # GPUs are discovered only where no GPUs resource is defined (even empty); and
    # condor_startd drops a GPUs resource that MACHINE_RESOURCE_NAMES leaves out
    discover = not wanted or "gpus" in wanted
    for full in defined_names:
        upper = full.upper()
        if upper in GPU_RESOURCE_KNOBS:
            discover = False
        if upper.startswith(OFFLINE):
            offline[full[len(OFFLINE):].lower()] = tuple(_list(_text(config, full)))
            continue
        if upper.startswith("MACHINE_RESOURCE_INVENTORY_"):
            name = full[len("MACHINE_RESOURCE_INVENTORY_"):]
            target = inventories
        elif upper.startswith("MACHINE_RESOURCE_") and upper != "MACHINE_RESOURCE_NAMES":
            name = full[len("MACHINE_RESOURCE_"):]
            target = resources
        else:
            continue
        if wanted and name.lower() not in wanted:
            continue
        value = _text(config, full)
        if value is not None:
            target[name] = value
    num_cpus = _number(config, "NUM_CPUS", integer=False)
    memory = _number(config, "MEMORY")
    return DetectionParams(
        execute_dir=_text(config, "EXECUTE") or DEFAULT_EXECUTE,
        num_cpus=num_cpus,
        memory_mb=None if memory is None else int(memory),
        reserved_memory_mb=int(_number(config, "RESERVED_MEMORY") or 0),
        reserved_disk_mb=int(_number(config, "RESERVED_DISK") or 0),
        count_hyperthread_cpus=_bool(config, "COUNT_HYPERTHREAD_CPUS", True),
        gpu_discovery=gpu_discovery(config) if discover else None,
        machine_resources=resources,
        machine_inventories=inventories,
        offline=offline,
        hostname=hostname or _text(config, "FULL_HOSTNAME"),
    )


def slot_type_inputs(config: ConfigLookup) -> list[SlotTypeInput]:
    """The configured slot types; HTCondor's defaults when none has slots."""
    max_types = int(_number(config, "MAX_SLOT_TYPES") or MAX_SLOT_TYPES_DEFAULT)
    types = []
    for n in range(1, max_types + 1):
        count = _number(config, f"NUM_SLOTS_TYPE_{n}")
        if not count:
            continue
        types.append(SlotTypeInput(
            type_id=n,
            spec=_text(config, f"SLOT_TYPE_{n}") or "",
            count=int(count),
            partitionable=_bool(config, f"SLOT_TYPE_{n}_PARTITIONABLE", False),
        ))
    if types:
        return types
    num_slots = _number(config, "NUM_SLOTS")
    return default_slot_types(None if num_slots is None else int(num_slots),
                              _bool(config, "SLOT_TYPE_0_PARTITIONABLE", True))


def modify_request_exprs(config: ConfigLookup, slot_type: int | None = None) -> dict[str, str]:
    exprs = {}
    for res in ("Cpus", "Memory", "Disk"):
        text = _text(config, f"MODIFY_REQUEST_EXPR_REQUEST{res.upper()}", slot_type=slot_type)
        if text is not None:
            exprs[res] = text
    return exprs


def startd_attrs(config: ConfigLookup, slot_id: int) -> dict[str, str]:
    """STARTD_ATTRS plus SLOT<N>_STARTD_ATTRS, then SYSTEM_STARTD_ATTRS (HTCondor's own:
    COLLECTOR_HOST_STRING), each looked up with the slot prefix first."""
    names = _list(_text(config, "STARTD_ATTRS")) + _list(_text(config, "STARTD_EXPRS"))
    names += _list(_text(config, f"SLOT{slot_id}_STARTD_ATTRS"))
    names += _list(_text(config, "SYSTEM_STARTD_ATTRS"))
    values = {}
    for name in names:
        value = _text(config, name, slot=slot_id)
        if value is not None:
            values[name] = value
    return values


def daemon_ad_attrs(config: ConfigLookup) -> list[str]:
    """The names of STARTD_ATTRS and SYSTEM_STARTD_ATTRS, which the startd's daemon ad
    carries too (HTCondor's daemon core publishes them in every ad of the daemon)."""
    return [*_list(_text(config, "STARTD_ATTRS")), *_list(_text(config, "STARTD_EXPRS")),
            *_list(_text(config, "SYSTEM_STARTD_ATTRS"))]  # fmt: skip


def startd_slot_attrs(config: ConfigLookup) -> list[str]:
    return _list(_text(config, "STARTD_SLOT_ATTRS")) + _list(_text(config, "STARTD_SLOT_EXPRS"))


def rollup_settings(config: ConfigLookup) -> RollupSettings:
    """ADVERTISE_PSLOT_ROLLUP_INFORMATION and STARTD_PARTITIONABLE_SLOT_ATTRS."""
    return RollupSettings(
        enabled=_setting_bool(config, "ADVERTISE_PSLOT_ROLLUP_INFORMATION", True),
        extra_attrs=tuple(_list(_text(config, "STARTD_PARTITIONABLE_SLOT_ATTRS"))),
    )


def idle_policy(config: ConfigLookup, slot_id: int, now: int) -> PolicyFacts:
    """What a slot advertises before the policy engine has run: Unclaimed/Idle since now."""
    return PolicyFacts(
        entered_current_state=now,
        entered_current_activity=now,
        start=_text(config, "START", slot=slot_id) or "true",
        rank=_text(config, "RANK", slot=slot_id) or "0.0",
    )
