"""The environment a job gets for the slot's assigned resources, as condor_starter 25.x
sets it (starter.cpp: Starter::PublishToEnv and SetEnvironmentForAssignedRes).

For each resource the slot's `MachineResources` names (`Cpus Memory Disk Swap GPUs`):
- when the slot ad has `Assigned<Tag>`, or has `<Tag>` and `ENVIRONMENT_FOR_Assigned<Tag>`
  is set: `_CONDOR_Assigned<Tag>` = the assigned ids, else
  `ENVIRONMENT_VALUE_FOR_UnAssigned<Tag>` (GPUs: `10000`), and the variables
  `ENVIRONMENT_FOR_Assigned<Tag>` names, each id rewritten by its `/regex/replacement/`
  (GPUs by default: `GPU_DEVICE_ORDINAL=/(CUDA|OCL)//  CUDA_VISIBLE_DEVICES=/CUDA//`);
- with GPUs among them and `AUTO_SET_NVIDIA_VISIBLE_DEVICES` (default true):
  `NVIDIA_VISIBLE_DEVICES` = `GPU-<DeviceUuid>` of each GPU in `AvailableGPUs` (MIG
  devices: their `DeviceUuid` as is), and `CUDA_VISIBLE_DEVICES` the same; `none` (and
  CUDA_VISIBLE_DEVICES left as above) when the slot has no GPU with a DeviceUuid.

Computed by the daemon from the slot's ad (the starter never imports classad2) and handed
to the starter in its spec (`StarterSpec.resource_env`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from execd import log
from execd.classads import ClassAdError, evaluate, parse_expr

logger = log.get_logger("starter")

SEPARATOR = ","  # between the rewritten ids of one variable
# Ids as HTCondor's StringTokenIterator splits them (whitespace and commas).
_TOKENS = re.compile(r"[^\s,]+")
_FIRST_GPU_ID = "AvailableGPUs[0].Id"
_JOIN_UUIDS = 'join(",",evalInEachContext(strcat("GPU-",DeviceUuid),AvailableGPUs))'
_JOIN_MIG_UUIDS = 'join(",",evalInEachContext(DeviceUuid,AvailableGPUs))'


def _digits_and_commas(text: str) -> str:
    return "".join(c for c in text if c.isdigit() or c == ",")


def _rewrite(pattern: re.Pattern[str], replacement: str, resid: str) -> str:
    """The first match in `resid` replaced; `$1`..`$9` name groups, all else is literal."""
    found = pattern.search(resid)
    if found is None:
        return resid
    out = []
    i = 0
    while i < len(replacement):
        if replacement[i] == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            group = int(replacement[i + 1])
            if group <= (pattern.groups or 0):
                out.append(found.group(group) or "")
            i += 2
            continue
        out.append(replacement[i])
        i += 1
    return resid[:found.start()] + "".join(out) + resid[found.end():]


def env_for_assigned(proto: str, assigned: str, tag: str) -> dict[str, str]:
    """The variables of one `ENVIRONMENT_FOR_Assigned<tag>` value for `assigned` ids.

    `NAME` alone sets NAME to the ids (CUDA_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL: only
    their digits and commas) and ends the list; `NAME=/regex/replacement/` (any
    non-space delimiter) rewrites each id. A malformed entry is logged and ends the list,
    as in HTCondor.
    """
    env: dict[str, str] = {}
    rest = proto
    while True:
        rest = rest.lstrip()
        if not rest:
            return env
        name, eq, spec = rest.partition("=")
        if not eq:
            value = rest.strip()
            if value in ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"):
                assigned = _digits_and_commas(assigned)
            env[value] = assigned
            return env
        spec = spec.lstrip()
        delimiter = spec[:1]
        parts = spec[1:].split(delimiter, 2) if delimiter else []
        if len(parts) < 3:
            logger.error("assigned_env_ignored", resource=tag, variable=name.strip(),
                         why=f"missing replacement end marker: {spec}")  # fmt: skip
            return env
        regex, replacement, rest = parts
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            logger.error("assigned_env_ignored", resource=tag, variable=name.strip(),
                         why=f"bad regex {regex!r}: {exc}")  # fmt: skip
            return env
        if name.strip() == "CUDA_VISIBLE_DEVICES" and not regex:
            value = _digits_and_commas(assigned)
        else:
            value = SEPARATOR.join(_rewrite(pattern, replacement, resid)
                                   for resid in _TOKENS.findall(assigned))  # fmt: skip
        env[name.strip()] = value
        rest = rest.removeprefix(",")


def _string(slot_ad: Any, expression: str) -> str | None:
    try:
        value = evaluate(parse_expr(expression), my=slot_ad)
    except ClassAdError:
        return None
    return value if isinstance(value, str) else None


def nvidia_visible_devices(slot_ad: Any) -> str | None:
    """The slot's GPUs as NVIDIA's container runtime names them; None: no GPU."""
    first = _string(slot_ad, _FIRST_GPU_ID) or ""
    joined = _string(slot_ad, _JOIN_MIG_UUIDS if first.startswith("MIG-") else _JOIN_UUIDS)
    return joined or None


def assigned_resource_env(slot_ad: Any, knob: Callable[[str], str | None],
                          auto_nvidia: bool = True) -> dict[str, str]:  # fmt: skip
    """The job's variables for the resources of `slot_ad`; `knob(name)` reads the config
    (ENVIRONMENT_FOR_Assigned<Tag>, ENVIRONMENT_VALUE_FOR_UnAssigned<Tag>)."""
    listed = slot_ad.get("MachineResources")
    tags = listed.replace(",", " ").split() if isinstance(listed, str) else []
    env: dict[str, str] = {}
    for tag in tags:
        attr = f"Assigned{tag}"
        proto = knob(f"ENVIRONMENT_FOR_{attr}") or ""
        assigned = slot_ad.get(attr)
        is_assigned = isinstance(assigned, str)
        if not is_assigned and not (tag in slot_ad and proto):
            continue
        if not is_assigned:
            assigned = knob(f"ENVIRONMENT_VALUE_FOR_Un{attr}") or ""
        if proto:
            env.update(env_for_assigned(proto, str(assigned), tag))
        env[f"_CONDOR_{attr}"] = str(assigned)
    if auto_nvidia and any(tag.lower() == "gpus" for tag in tags):
        devices = nvidia_visible_devices(slot_ad)
        if devices is not None:
            env["NVIDIA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"] = devices
        else:
            env["NVIDIA_VISIBLE_DEVICES"] = "none"
    return env
