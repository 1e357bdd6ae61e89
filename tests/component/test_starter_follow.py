"""The daemon following a starter: seed 002 decisions carried out once each, the broken
slot and the enforcement statement in the slot ads (real Node, recorded host)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from recorded_nodes import FIXTURES

from execd.cgroups.enforcement import announce_enforcement, enforcement
from execd.config.loader import parse_config_text
from execd.config.settings import load_settings
from execd.daemon.node import Node
from execd.machine.reader import FixtureHostReader
from execd.starter.follow import StarterFollower, starter_policy
from execd.starter.policy import StarterAction, StarterPolicy


class Job:
    def __init__(self) -> None:
        self.job_id = "1.0"
        self.slot = "slot1_1"
        self.ad: dict[str, Any] = {"Owner": "alice", "KillSig": "SIGTERM"}
        self.report: dict[str, Any] | None = None
        self.done = asyncio.Event()


class Controls:
    """Records what the follower asked of the starter."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def soft_kill(self) -> None:
        self.calls.append("soft_kill")

    def hard_kill(self) -> None:
        self.calls.append("hard_kill")


def follower(tmp_path: Path, policy: StarterPolicy) -> tuple[StarterFollower, Controls,
                                                             list[tuple[str, str]]]:
    controls = Controls()
    broken: list[tuple[str, str]] = []
    f = StarterFollower(Job(), controls, str(tmp_path / "status.json"), policy, memory_mb=100,
                        interval=0.01, mark_broken=lambda s, r: broken.append((s, r)))
    return f, controls, broken


def publish(tmp_path: Path, **status: object) -> None:
    (tmp_path / "status.json").write_text(json.dumps(status))


SEED = StarterPolicy(evict="ImageSize > (Memory * 1024)", want_vacate="True",
                     kill="(CurrentTime - EnteredCurrentState) > 300")


def test_seed_example_vacates_once_then_kills_after_five_minutes(tmp_path: Path) -> None:
    f, controls, _ = follower(tmp_path, SEED)
    assert f.poll(now=1000) is StarterAction.NONE  # no status published yet
    publish(tmp_path, JobState="Running", EnteredCurrentState=900, ImageSize=50 * 1024)
    assert f.poll(now=1000) is StarterAction.NONE
    publish(tmp_path, JobState="Running", EnteredCurrentState=900, ImageSize=101 * 1024)
    assert f.poll(now=1000) is StarterAction.VACATE
    assert f.poll(now=1001) is StarterAction.VACATE  # decided again, carried out once
    publish(tmp_path, JobState="Vacating", EnteredCurrentState=1001, ImageSize=101 * 1024)
    assert f.poll(now=1200) is StarterAction.NONE
    assert f.poll(now=1302) is StarterAction.KILL
    assert controls.calls == ["soft_kill", "hard_kill"]


def test_want_vacate_false_hard_kills_at_once(tmp_path: Path) -> None:
    f, controls, _ = follower(tmp_path, StarterPolicy(evict="NumProcesses > 3",
                                                      want_vacate="False"))
    publish(tmp_path, JobState="Running", NumProcesses=4)
    assert f.poll(now=1) is StarterAction.KILL
    assert controls.calls == ["hard_kill"]


def test_the_follower_polls_until_the_job_ends_then_reports_a_broken_slot(
    tmp_path: Path,
) -> None:
    f, controls, broken = follower(tmp_path, StarterPolicy(evict="NumProcesses > 3"))
    publish(tmp_path, JobState="Running", NumProcesses=9)

    async def scenario() -> None:
        task = asyncio.create_task(f.run())
        while not controls.calls:
            await asyncio.sleep(0.01)
        f.job.report = {"SlotBrokenReason": "slice still holds 1 processes"}
        f.job.done.set()
        await task

    asyncio.run(scenario())
    assert controls.calls == ["soft_kill"]
    assert broken == [("slot1_1", "slice still holds 1 processes")]


def test_unset_policy_knobs_take_the_seed_defaults() -> None:
    policy = starter_policy(load_settings(parse_config_text("")))
    assert policy.evict is None and policy.kill is None
    assert policy.want_vacate == "True"


def node(text: str = "") -> Node:
    config = parse_config_text("EXECUTE = /tmp\nuse FEATURE : PartitionableSlot\n" + text)
    return Node.build(config, load_settings(config), FixtureHostReader(FIXTURES / "h100-node"))


def ad_of(n: Node, name: str) -> Any:
    (ad,) = [a for a in n.ads() if str(a["Name"]).startswith(name + "@")]
    return ad


def test_a_broken_d_slot_is_named_in_its_partitionable_parents_ad() -> None:
    n = node()
    assert "SlotBrokenReason" not in ad_of(n, "slot1")
    n.mark_broken("slot1_3", "cannot remove cgroup: it still has processes")
    assert ad_of(n, "slot1")["SlotBrokenReason"] == (
        "slot1_3: cannot remove cgroup: it still has processes")


def test_slot_ads_say_who_enforces_each_limit() -> None:
    hybrid = node("EXECD_PIDS_MAX = 500\n")
    announce_enforcement(hybrid, frozenset(), hybrid.settings)
    ad = ad_of(hybrid, "slot1")
    assert ad["CgroupEnforcement"] == "memory:policy cpu:none pids:none"
    assert (ad["CgroupMemoryEnforcement"], ad["CgroupCpuEnforcement"],
            ad["CgroupPidsEnforcement"]) == ("policy", "none", "none")
    full = node("EXECD_PIDS_MAX = 500\n")
    announce_enforcement(full, frozenset({"cpu", "memory", "pids"}), full.settings)
    assert ad_of(full, "slot1")["CgroupEnforcement"] == "memory:kernel cpu:kernel pids:kernel"


def test_enforcement_follows_the_memory_policy_and_pids_knob() -> None:
    assert enforcement(frozenset(), "none", None)["memory"] == "none"
    assert enforcement(frozenset(), "soft", None)["memory"] == "none"
    assert enforcement(frozenset({"pids"}), "hard", None)["pids"] == "none"  # no EXECD_PIDS_MAX
