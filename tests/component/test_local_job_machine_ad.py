"""A local job's `.machine.ad` text is built for its own slot at launch, never by
rebuilding every slot's ad (the launch path: bench/README.md, the starter's spec), and
still holds what the slot publishes: its name and resources, STARTD_ATTRS, the policy
engine's state and activity, no claim id.

The daemon is built as `execd run` builds it, without its cgroup tree (no starter runs:
the spec is what the starter would be handed)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import pytest

from execd.daemon.job import Job
from execd.daemon.policy_glue import now
from execd.policy import actions as act
from tests.component.in_process_daemon import daemon_without_cgroups

FOUR_STATIC_SLOTS = ("SLOT_TYPE_1_PARTITIONABLE = False\nNUM_SLOTS_TYPE_1 = 4\n"
                     "SLOT_TYPE_1 = cpus=1\nSTARTD_ATTRS = Site\nSite = \"here\"\n")
JOB = {"Owner": "alice", "Cmd": "/bin/true", "RequestCpus": 1, "RequestMemory": 32}


def test_the_machine_ad_is_its_slots_alone(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> str | None:
        daemon = daemon_without_cgroups(tmp_path, FOUR_STATIC_SLOTS)
        jobs = daemon.jobs
        granted = jobs.request_claim("slot2", dict(JOB))
        job = Job("local.1", "slot2", jobs.lookup(granted["claim_id"])[1], dict(JOB))
        started, actions = daemon.engine.activate("slot2", dict(JOB), now())
        assert started
        daemon.execute([a for a in actions if not isinstance(a, act.SpawnStarter)])

        def every_slots_ad(*_args: Any) -> NoReturn:
            raise AssertionError("every slot's ad was built to launch one job")

        monkeypatch.setattr(daemon, "ads", every_slots_ad)
        monkeypatch.setattr(daemon.node, "ads", every_slots_ad)
        base = tmp_path / "cgroup" / "execd"
        jobs.tree = SimpleNamespace(hierarchy=SimpleNamespace(mount=tmp_path / "cgroup"),
                                    base=base)  # type: ignore[assignment]  # paths only
        return jobs.spec(job, tmp_path / "work").machine_ad

    machine = asyncio.run(scenario())
    assert machine is not None
    lines = machine.splitlines()
    assert lines == sorted(lines)  # condor_starter's long form
    values = dict(line.split(" = ", 1) for line in lines)
    assert values["Name"].startswith('"slot2@')
    assert (values["Cpus"], values["State"], values["Activity"]) == ("1", '"Claimed"', '"Busy"')
    assert values["Site"] == '"here"'  # STARTD_ATTRS
    assert "ClaimId" not in values and "#[" not in machine  # no claim id
