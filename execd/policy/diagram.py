"""Generate docs/states.md (a mermaid stateDiagram) from the transition table.

Run ``python -m execd.policy.diagram > docs/states.md``.
"""

from __future__ import annotations

import sys

from execd.policy.states import Activity, State
from execd.policy.transitions import TRANSITIONS


def _node(pair: tuple[State, Activity]) -> str:
    return f"{pair[0].value}_{pair[1].value}"


def render() -> str:
    lines = [
        "# Slot states and activities",
        "",
        "Generated from `execd/policy/transitions.py` by `python -m execd.policy.diagram`;",
        "edge labels are the manual's transition numbers (seed 000, 3.5.7) and the trigger.",
        "",
        "Moves of HTCondor 25 the manual does not number (HTCONDOR_BEHAVIOUR.md): `d1`, a",
        "dynamic slot born in Owner and claimed at once; `c1`/`c2`, a job that ended normally",
        "leaves Claimed/Cleaning when its starter exits (or is evicted from it); `p1`, a",
        "busy slot straight to Preempting, without Retiring: a preempting claim finding no",
        "retirement left (MaxJobRetirementTime 0, or no more than the vacate time), an",
        "expired lease, a release, a fast vacate, drain or shutdown. Transition 29",
        "also covers a slot released from the daemon's one backfill client while other slots",
        "still use it (`backfill_slot_released`); the last slot out kills the client.",
        "",
        "```mermaid",
        "stateDiagram-v2",
    ]
    for t in TRANSITIONS:
        lines.append(f"    {_node(t.source)} --> {_node(t.target)}: {t.number} {t.trigger}")
    lines += ["```", ""]
    return "\n".join(lines)


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
