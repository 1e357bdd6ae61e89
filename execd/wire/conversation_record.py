"""A shadow conversation's record (`Conversation`): what it knows once its job runs,
all that a restarted execd needs to go on with it (execd/wire/shadow_resume.py).

execd/wire/shadow.py makes it as the job starts and gives it to `on_running`; the
daemon keeps it in its store as JSON (execd/daemon/pool_conversation.py) and reads it
back after a restart in place. No secret is in it: the claim id and the shadow's
connection are kept elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from execd.wire.classad_codec import WireAd


@dataclass(frozen=True)
class Conversation:
    """What the conversation knows once its job runs: all that a restarted execd needs
    to go on with it (execd/wire/shadow_resume.py). No secret in it."""

    global_job_id: str
    job_wire: WireAd  # the shadow's job ad
    sandbox: str
    inputs: list[str]  # what the input transfer brought (not sent back)
    before: dict[str, float]  # the sandbox's files and their mtimes before the job
    transfer: bool  # output goes back by file transfer
    starter_ad: WireAd
    lease_s: float | None
    started: int  # JobStartDate
    input_bytes: int = 0  # what the input transfer brought
    # The sandbox directory as the job started in it (lstat) and the job's uid: a resume
    # trusts only that directory with a refreshed proxy. None in a record made before.
    sandbox_dev: int | None = None
    sandbox_ino: int | None = None
    job_uid: int | None = None
    job_gid: int | None = None  # the job's group (its .update.ad's): None before recorded

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, values: Mapping[str, Any]) -> Conversation:
        """ValueError naming what is missing or wrong."""
        try:
            state = cls(**values)
        except TypeError as exc:
            raise ValueError(f"conversation record: {exc}") from None
        if not isinstance(state.job_wire, dict) or not isinstance(state.starter_ad, dict):
            raise ValueError("conversation record: ads are not objects")
        return state
