"""Who enforces each job limit on this node: the kernel, execd's policy, or nobody.

Said once in the log at startup and in every slot ad (CgroupEnforcement and
Cgroup<Memory|Cpu|Pids>Enforcement), so an admin on a hybrid host without controllers
sees that memory is enforced by evicting/holding from measured usage, not by memory.max.
"""

from __future__ import annotations

from typing import Any

from execd import log
from execd.cgroups.limits import POLICIES
from execd.config.settings import Settings
from execd.errors import CgroupError, ExecdError

logger = log.get_logger("cgroups")


def enforcement(
    controllers: frozenset[str], memory_policy: str, pids_max: int | None
) -> dict[str, str]:
    """Who enforces each limit on this node: "kernel", "policy" (execd, from measured
    usage) or "none" -- for the log at startup and the slot ads."""
    if memory_policy not in POLICIES:
        raise CgroupError(
            f"CGROUP_MEMORY_LIMIT_POLICY is {memory_policy!r}; expected one of {POLICIES}"
        )
    if memory_policy == "none":
        memory = "none"
    elif "memory" in controllers:
        memory = "kernel"
    else:
        memory = "policy" if memory_policy in ("hard", "custom") else "none"
    return {
        "memory": memory,
        "cpu": "kernel" if "cpu" in controllers else "none",
        "pids": "kernel" if pids_max and "pids" in controllers else "none",
    }


def enforcement_attrs(who: dict[str, str]) -> dict[str, str]:
    """The slot ad's view: CgroupEnforcement plus one Cgroup<Limit>Enforcement each."""
    attrs = {f"Cgroup{name.capitalize()}Enforcement": how for name, how in who.items()}
    attrs["CgroupEnforcement"] = " ".join(f"{name}:{how}" for name, how in who.items())
    return attrs


def announce_enforcement(node: Any, controllers: frozenset[str], settings: Settings) -> None:
    """Once at startup: log who enforces each limit and publish it in every slot ad."""
    try:
        who = enforcement(controllers, settings.get_str("CGROUP_MEMORY_LIMIT_POLICY") or "hard",
                          settings.get_int("EXECD_PIDS_MAX") or None)
    except ExecdError as exc:
        logger.error("cgroup_enforcement_unknown", error=str(exc))
        return
    level = logger.info if set(who.values()) == {"kernel"} else logger.warning
    level("cgroup_enforcement", controllers=sorted(controllers), **who)
    node.node_attrs.update(enforcement_attrs(who))
