"""A test per lettered state-level edge (seed 003 "Machine States", A-P)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from execd.policy import actions as act
from execd.policy.states import State
from execd.policy.transitions import STATE_EDGES, TRANSITIONS
from tests.unit.policy_helpers import Driver

DESKTOP = {"START": "KeyboardIdle > 900", "IS_OWNER": "(START =?= False)"}


def edges(d: Driver) -> list[str]:
    return [str(a.fields["edge"]) for a in d.actions if isinstance(a, act.LogEvent)
            and a.event == "slot_state_changed" and a.fields["edge"] is not None]


def _a() -> Driver:
    return Driver()


def _b() -> Driver:
    d = Driver(DESKTOP)
    d.set_facts(KeyboardIdle=1)
    d.tick(5)
    return d


def _c() -> Driver:
    d = Driver()
    d.do(d.engine.match("slot1", d.clock.now()))
    return d


def _d() -> Driver:
    d = Driver()
    d.claim()
    return d


def _e() -> Driver:
    return Driver({"START_BACKFILL": "True"}, backfill=True)


def _f() -> Driver:
    d = _c()
    d.tick(1000)
    return d


def _g() -> Driver:
    d = _c()
    d.claim()
    return d


def _h() -> Driver:
    d = Driver({"PREEMPT": "True"})
    d.busy()
    d.tick(5)
    return d


def _i() -> Driver:
    d = Driver({"RANK": 'Owner == "boss"'})
    d.busy()
    d.claim({"Owner": "boss"})
    d.starter_exited()
    return d


def _j() -> Driver:
    d = _h()
    d.starter_exited()
    return d


def _backfill_then(event: Callable[[Driver], object]) -> Driver:
    d = _e()
    event(d)
    d.do(d.engine.backfill_client_exited(d.clock.now()))
    return d


def _k() -> Driver:
    return _backfill_then(lambda d: d.do(d.engine.vacate("slot1", d.clock.now())))


def _l() -> Driver:
    return _backfill_then(lambda d: d.do(d.engine.match("slot1", d.clock.now())))


def _m() -> Driver:
    return _backfill_then(lambda d: d.claim())


def _n() -> Driver:
    d = _p()
    d.do(d.engine.cancel_drain(d.clock.now()))
    return d


def _o() -> Driver:
    d = Driver({"START": "False", "IS_OWNER": "START =?= False"})
    d.do(d.engine.drain("graceful", d.clock.now()))
    return d


def _p() -> Driver:
    d = Driver()
    d.do(d.engine.drain("graceful", d.clock.now()))
    return d


SCENARIOS = {"A": _a, "B": _b, "C": _c, "D": _d, "E": _e, "F": _f, "G": _g, "H": _h,
             "I": _i, "J": _j, "K": _k, "L": _l, "M": _m, "N": _n, "O": _o, "P": _p}


@pytest.mark.parametrize("letter", sorted(SCENARIOS))
def test_state_edge(letter: str) -> None:
    assert letter in edges(SCENARIOS[letter]())


def test_every_state_edge_is_in_the_table() -> None:
    crossed = {(t.source[0], t.target[0]) for t in TRANSITIONS if t.source[0] != t.target[0]}
    assert set(STATE_EDGES) <= crossed
    assert {s for pair in STATE_EDGES for s in pair} == set(State)
