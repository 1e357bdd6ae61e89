"""A claimed slot's ad names its claimant as HTCondor 25's startd does: RemoteOwner and
RemoteUser are the job's User (Owner only without one), the accounting group carries the
user's domain, and a waiting higher-ranked claim is published as Preempting*."""

from __future__ import annotations

from execd.daemon.pool_claimant import Claimant, claimant_attributes
from tests.unit.policy_helpers import Driver


def test_owner_and_user_are_the_jobs_user() -> None:
    claimant = Claimant.of({"Owner": "alice", "User": "alice@submit.example"}, "vm")
    assert claimant.attributes("Remote") == {"RemoteUser": "alice@submit.example",
                                             "RemoteOwner": "alice@submit.example"}


def test_without_user_the_owner_stands_in_qualified_by_the_domain_for_remote_user() -> None:
    claimant = Claimant.of({"Owner": "alice", "AccountingGroup": "group_a.alice"}, "vm")
    assert claimant.attributes("Remote") == {"RemoteUser": "alice@vm", "RemoteOwner": "alice",
                                             "AccountingGroup": "group_a.alice@vm"}


def test_a_request_without_owner_or_user_names_nobody() -> None:
    assert Claimant.of({"Cmd": "/bin/true"}, "vm").attributes("Remote") == {}
    assert Claimant.of(None, "vm").attributes("Remote") == {}


def test_an_unclaimed_slot_publishes_no_claimant() -> None:
    assert claimant_attributes(Driver().slot, "vm") == {}


def test_a_claimed_slot_and_its_preempting_claim() -> None:
    d = Driver({"RANK": 'TARGET.Owner == "boss"', "MAXJOBRETIREMENTTIME": "3600"})
    d.busy({"Owner": "alice", "User": "alice@vm"})
    assert claimant_attributes(d.slot, "vm") == {
        "CurrentRank": 0.0, "RemoteUser": "alice@vm", "RemoteOwner": "alice@vm"}
    boss = {"Owner": "boss", "User": "boss@vm", "AccountingGroup": "group_b.boss"}
    assert d.do(d.engine.request_claim("slot1", d.ids.new(), boss, d.clock.now()))
    assert claimant_attributes(d.slot, "vm") == {
        "CurrentRank": 0.0, "RemoteUser": "alice@vm", "RemoteOwner": "alice@vm",
        "PreemptingRank": 1.0, "PreemptingUser": "boss@vm", "PreemptingOwner": "boss@vm",
        "PreemptingAccountingGroup": "group_b.boss@vm"}
