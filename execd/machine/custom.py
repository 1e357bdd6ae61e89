"""Custom resources: MACHINE_RESOURCE_<name> and MACHINE_RESOURCE_INVENTORY_<name>.

``MACHINE_RESOURCE_<name>`` is a count (``4``) or a list of instance ids
(``cog0, cog1``). ``MACHINE_RESOURCE_INVENTORY_<name>`` is a command whose output
holds a ``Detected<name> = "id1, id2"`` line, or ``Detected<name> = <number>`` for that
many instances without ids (other lines are ignored, as HTCondor reads extra attributes
from it); anything else is a ResourceError naming the resource.
"""

from __future__ import annotations

import contextlib
import math
import re
import shlex

from execd.errors import ResourceError
from execd.machine.facts import CustomResource
from execd.machine.reader import HostReader

_ID = re.compile(r"^[A-Za-z0-9_.:/-]+$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
INVENTORY_TIMEOUT_S = 60.0
NOT_FOUND = 127  # HostReader.run_command's (and a shell's) status for a missing program


class InventoryNotInstalledError(ResourceError):
    """The inventory's program does not exist here."""


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ResourceError(f"MACHINE_RESOURCE_{name}: {name!r} is not a valid resource name")


def _ids(name: str, text: str, source: str) -> tuple[str, ...]:
    ids = tuple(part.strip() for part in re.split(r"[,\s]+", text) if part.strip())
    for one in ids:
        if not _ID.match(one):
            raise ResourceError(f"{source}: {one!r} is not a valid id for resource {name}")
    if len(set(ids)) != len(ids):
        raise ResourceError(f"{source}: resource {name} lists an id twice")
    return ids


def parse_machine_resource(name: str, value: str) -> CustomResource:
    _check_name(name)
    source = f"MACHINE_RESOURCE_{name}"
    text = value.strip()
    try:
        count = float(text)
    except ValueError:
        ids = _ids(name, text, source)
        if not ids:
            raise ResourceError(f"{source} is empty") from None
        return CustomResource(name=name, count=len(ids), instances=ids)
    if not count >= 0:  # also refuses NaN
        raise ResourceError(f"{source} = {text}: a resource count cannot be negative")
    return CustomResource(name=name, count=count)


def inventory_output(reader: HostReader, name: str, command: str,
                     source: str | None = None) -> str:
    """The standard output of MACHINE_RESOURCE_INVENTORY_<name>'s command, or of the knob
    `source` names (ResourceError if it cannot be split or run, or fails)."""
    _check_name(name)
    source = source or f"MACHINE_RESOURCE_INVENTORY_{name}"
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ResourceError(f"{source}: cannot split command {command!r}: {exc}") from None
    if not argv:
        raise ResourceError(f"{source} is empty")
    result = reader.run_command(argv, INVENTORY_TIMEOUT_S)
    if result.returncode == NOT_FOUND:
        raise InventoryNotInstalledError(f"{source}: {argv[0]} is not installed")
    if result.returncode != 0:
        raise ResourceError(
            f"{source}: {argv[0]} exited with status {result.returncode}: "
            f"{result.stderr.strip()[:200]}"
        )
    return result.stdout


def detected(name: str, output: str) -> tuple[str, ...] | float:
    """What an inventory's ``Detected<name>`` line says: its ids (``"id1, id2"``), or a
    number of instances without ids, as condor_startd reads it (condor_gpu_discovery
    prints ``DetectedGPUs=0`` where it finds no GPU)."""
    source = f"MACHINE_RESOURCE_INVENTORY_{name}"
    wanted = f"detected{name}".lower()
    for line in output.splitlines():
        attr, eq, value = line.partition("=")
        if not eq or attr.strip().lower() != wanted:
            continue
        value = value.strip()
        with contextlib.suppress(ValueError):
            count = float(value)
            if count >= 0 and math.isfinite(count):
                return count
        if len(value) < 2 or value[0] != '"' or value[-1] != '"':
            raise ResourceError(
                f"{source}: expected Detected{name} = \"id1, id2, ...\" or a number, "
                f"got {line.strip()!r}"
            )
        return _ids(name, value[1:-1], source)
    first = output.strip().splitlines()[0][:100] if output.strip() else "<empty>"
    raise ResourceError(
        f"{source}: the output has no Detected{name} line (first line: {first!r})"
    )


def detected_ids(name: str, output: str) -> tuple[str, ...]:
    """The ids of an inventory's ``Detected<name> = "id1, id2"`` line (none: a number)."""
    found = detected(name, output)
    return found if isinstance(found, tuple) else ()


def run_inventory(reader: HostReader, name: str, command: str) -> CustomResource:
    found = detected(name, inventory_output(reader, name, command))
    if not isinstance(found, tuple):  # a number: that many, without ids
        return CustomResource(name=name, count=found)
    return CustomResource(name=name, count=len(found), instances=found, inventory=True)
