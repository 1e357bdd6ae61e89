"""Match notification (seed 000: Unclaimed -> Matched, 6; MATCH_TIMEOUT -> Owner, 8).

A scheduler that matched a job to a slot says so before it claims it; the slot then
waits in Matched (advertising Start = False) for the claim, MATCH_TIMEOUT at most. A
claim that comes after the match lapsed — timed out, or START became false — is
refused saying which. Partitionable slots are claimed directly: a claim carves them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd.daemon.control import ControlError
from execd.daemon.policy_glue import now
from execd.errors import ExecdError

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon


class Matches:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.deadlines: dict[str, float] = {}  # slot -> when its match times out (monotonic)

    def match(self, slot_name: Any) -> dict[str, Any]:
        """The `match` verb: the slot waits in Matched for its claim."""
        engine = self.daemon.engine
        if not isinstance(slot_name, str) or slot_name not in engine.slots:
            raise ControlError("bad_args", f"no slot named {slot_name!r}")
        slot_id = int(slot_name.removeprefix("slot").split("_")[0])
        if "_" not in slot_name and slot_id in self.daemon.node.slots.partitionable:
            raise ControlError("refused", f"{slot_name} is partitionable: claim it directly "
                               "(request_claim carves a dynamic slot)")
        moment = now()
        try:
            actions = engine.match(slot_name, moment)
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        self.daemon.execute(actions)
        timeout = engine.config.number("MATCH_TIMEOUT")
        self.deadlines[slot_name] = moment.mono + timeout
        return {"slot": slot_name, "state": "Matched", "match_timeout": timeout}

    def next_timeout(self) -> float:
        """When the policy must look at a Matched slot again (MATCH_TIMEOUT), or inf."""
        slots = self.daemon.engine.slots
        return min((deadline for name, deadline in self.deadlines.items()
                    if name in slots and slots[name].state.value == "Matched"),
                   default=float("inf"))

    def check(self, slot: str, mono: float) -> None:
        """Before a claim: refuse it, saying why, if the slot's match lapsed."""
        deadline = self.deadlines.get(slot)
        state = self.daemon.engine.slots[slot].state.value
        if deadline is None or state == "Matched":
            return
        del self.deadlines[slot]
        if mono >= deadline:
            timeout = self.daemon.engine.config.number("MATCH_TIMEOUT")
            raise ControlError("refused", f"{slot}: the match timed out (MATCH_TIMEOUT = "
                               f"{timeout:g}s); the slot went back to {state}")
        raise ControlError("refused", f"{slot}: START became false while Matched; "
                           f"the slot went back to {state}")

    def claimed(self, slot: str) -> None:
        self.deadlines.pop(slot, None)

