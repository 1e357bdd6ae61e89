"""What a user reads in a job's user log about the slot a job ran in, in a form two
execute points can be compared by: the execute event's (001) resource lines and the
"Partitionable Resources" table of the eviction (004) and termination (005) events.

Kept: the names and amounts the shadow took from the starter (001: `Cpus = 1`,
`Memory = 128`, ...; the table's Request, Allocated and Assigned columns). Left out,
as they differ from run to run: the slot's name, the sandbox path and the Usage column.
Used by the pool tier (tests/pool/test_pool_jobs.py) and the VM tier's pool test
(tests/vm/guest/test_pool_oom.py).
"""

from __future__ import annotations

import re

SANDBOX_LINE = re.compile(r'^CondorScratchDir = ".*"$')


def events(user_log: str) -> list[tuple[str, list[str]]]:
    """(code, body lines without their leading tab) of each event, in order."""
    found = []
    for block in user_log.split("...\n"):
        lines = block.strip("\n").splitlines()
        if lines:
            found.append((lines[0].split(" ", 1)[0], [line[1:] for line in lines[1:]]))
    return found


def execute_resources(user_log: str) -> list[list[str]]:
    """Each execute event's lines under its headline, the slot's name and sandbox path
    replaced: `SlotName: SLOT`, `CondorScratchDir = SANDBOX`, `Cpus = 1`, ..."""
    shown = []
    for code, body in events(user_log):
        if code == "001":
            shown.append(["SlotName: SLOT" if line.startswith("SlotName: ") else
                          "CondorScratchDir = SANDBOX" if SANDBOX_LINE.match(line) else line
                          for line in body])  # fmt: skip
    return shown


def resource_table(body: list[str]) -> list[tuple[str, str, str, str]]:
    """The rows of an event's "Partitionable Resources" table as (resource, request,
    allocated, assigned); the usage column left out. [] when there is none."""
    headers = [i for i, line in enumerate(body) if line.startswith("Partitionable Resources")]
    if not headers:
        return []
    header = body[headers[0]].split(":", 1)[1]
    # the columns are right-aligned under their titles (Assigned: left-aligned, last)
    edges = [header.index(title) + len(title) for title in ("Usage", "Request", "Allocated")
             if title in header]  # fmt: skip
    rows = []
    for line in body[headers[0] + 1:]:
        if not line.startswith("   ") or ":" not in line:
            break
        label, cells = line.split(":", 1)
        columns = [cells[a:b].strip() for a, b in zip([0, *edges], [*edges, None], strict=True)]
        columns += [""] * (4 - len(columns))
        rows.append((label.strip(), columns[1], columns[2], columns[3]))
    return rows


def resource_tables(user_log: str) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """(code, table) for each event that has a "Partitionable Resources" table."""
    return [(code, table) for code, body in events(user_log) if (table := resource_table(body))]
