"""The committed state diagram is current; claim ids keep their secret; leases."""

from __future__ import annotations

from pathlib import Path

import pytest

from execd.claims.ids import ClaimIdFactory, parse_claim_id
from execd.claims.lease import lease_duration
from execd.policy import actions as act
from execd.policy.diagram import render
from tests.unit.policy_helpers import Driver

ROOT = Path(__file__).resolve().parents[2]


def test_committed_state_diagram_is_current() -> None:
    assert (ROOT / "docs" / "states.md").read_text() == render()


def test_claim_id_format_and_secret_hidden() -> None:
    ids = ClaimIdFactory("<10.0.0.1:9618>", 1700000000)
    a, b = ids.new(), ids.new()
    assert a.secret != b.secret and len(a.secret) == 64
    assert a.secret not in str(a) and a.secret not in repr(a)
    assert str(a) == "<10.0.0.1:9618>#1700000000#1"
    assert a.full().startswith("<10.0.0.1:9618>#1700000000#1#[")
    assert parse_claim_id(a.full()) == a


def test_malformed_claim_id_error_has_no_secret() -> None:
    with pytest.raises(ValueError, match="malformed") as info:
        parse_claim_id("<a>#1#2#[x]" + "zz" * 32)
    assert "zz" not in str(info.value)


def test_lease_duration_rules() -> None:
    assert lease_duration(1200, 300, 6) == 1200
    assert lease_duration(0, 300, 6) == 1800
    assert lease_duration(None, 60, 6) == 360


def test_bad_expression_logged_once_per_slot_per_expression() -> None:
    d = Driver({"PREEMPT": '"not a bool"'})
    d.busy()
    for _ in range(5):
        d.tick(5)
    errors = [a for a in d.actions if isinstance(a, act.LogEvent)
              and a.event == "policy_expression_error"]
    assert len(errors) == 1 and errors[0].fields["expression"] == "PREEMPT"
    assert d.pair == "Claimed/Busy"  # not true: no preemption


def test_dynamic_slot_born_owner_claimed_then_deleted() -> None:
    d = Driver()
    now = d.clock.now()
    d.do(d.engine.add_slot("slot1_1", {"Cpus": 1}, now, dynamic=True, parent="slot1"))
    assert d.engine.slot("slot1_1").state.value == "Owner"
    assert d.claim(slot="slot1_1")
    assert "d1" in d.transitions()
    d.do(d.engine.release("slot1_1", d.clock.now()))
    d.tick(1)
    assert "slot1_1" not in d.engine.slots
    assert act.DeleteDynamicSlot("slot1_1") in d.actions


def test_polling_interval_while_claimed() -> None:
    d = Driver(numbers={"POLLING_INTERVAL": 5, "UPDATE_INTERVAL": 300})
    assert d.engine.next_evaluation_due(0) == 300
    d.claim()
    assert d.engine.next_evaluation_due(0) == 5


def test_machine_ad_timers() -> None:
    d = Driver()
    d.busy()
    d.tick(42)
    attrs = d.engine.attributes("slot1", d.clock.now())
    assert attrs["TotalJobRunTime"] == 42
    assert attrs["JobStart"] == int(d.clock.wall) - 42
    assert attrs["State"] == "Claimed" and attrs["Activity"] == "Busy"


def test_policy_core_is_sans_io() -> None:
    import ast

    forbidden = {"asyncio", "os", "subprocess", "time", "socket"}
    for path in (ROOT / "execd" / "policy").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            assert not forbidden & set(names), f"{path.name} imports {names}"
