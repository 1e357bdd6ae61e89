"""The transition table: data, each entry carrying the manual's number (seed 000, 3.5.7).

Triggers name what caused the move: an event from outside (``claim``, ``activate``,
``starter_exited`` ...) or a policy expression that became true during evaluation
(``is_owner_false``, ``suspend`` ...). The engine may only move a slot along an entry
of this table; anything else raises :class:`PolicyError` naming state and trigger.
"""

from __future__ import annotations

from dataclasses import dataclass

from execd.errors import PolicyError
from execd.policy.states import Activity, State, label

S, A = State, Activity


@dataclass(frozen=True)
class Transition:
    source: tuple[State, Activity]
    trigger: str
    target: tuple[State, Activity]
    # the manual's transition number; "d1" (dynamic slots), "c1"/"c2" (Claimed/Cleaning)
    # and "p1" (Busy straight to Preempting) are HTCondor 25 moves the manual does not
    # number (HTCONDOR_BEHAVIOUR.md)
    number: str


Pair = tuple[State, Activity]


def _t(src: Pair, trigger: str, dst: Pair, n: str) -> Transition:
    return Transition(src, trigger, dst, n)


OI, UI, UB = (S.OWNER, A.IDLE), (S.UNCLAIMED, A.IDLE), (S.UNCLAIMED, A.BENCHMARKING)
MI = (S.MATCHED, A.IDLE)
CI, CB = (S.CLAIMED, A.IDLE), (S.CLAIMED, A.BUSY)
CS, CR = (S.CLAIMED, A.SUSPENDED), (S.CLAIMED, A.RETIRING)
CC = (S.CLAIMED, A.CLEANING)
PV, PK = (S.PREEMPTING, A.VACATING), (S.PREEMPTING, A.KILLING)
BI, BB, BK = (S.BACKFILL, A.IDLE), (S.BACKFILL, A.BUSY), (S.BACKFILL, A.KILLING)
DR, DI = (S.DRAINED, A.RETIRING), (S.DRAINED, A.IDLE)

TRANSITIONS: tuple[Transition, ...] = (
    _t(OI, "is_owner_false", UI, "1"),
    _t(UI, "is_owner_true", OI, "2"),
    _t(UI, "run_benchmarks", UB, "3"),
    _t(UB, "benchmarks_done", UI, "4"),
    # a claim or match may come while the benchmarks run (the manual's 5 and 6 leave
    # Unclaimed whatever its activity); the run's end then finds the slot moved on
    _t(UB, "claim", CI, "5"),
    _t(UB, "match", MI, "6"),
    _t(UI, "claim", CI, "5"),
    _t(UI, "match", MI, "6"),
    _t(UI, "start_backfill", BI, "7"),
    # condor_startd's abort_claim ("claiming protocol failed"): a claim request refused
    # without an answer (pool_pslot_preemption); IS_OWNER false takes it on to Unclaimed
    _t(UI, "claim_aborted", OI, "2"),
    _t(MI, "claim_aborted", OI, "8"),
    _t(MI, "match_timeout", OI, "8"),
    _t(MI, "start_false", OI, "8"),
    _t(MI, "claim", CI, "9"),
    _t(CI, "evict_vacate", PV, "10"),
    _t(CI, "evict_kill", PK, "10"),
    _t(CI, "activate", CB, "11"),
    _t(CB, "job_exited", CC, "12"),
    _t(CC, "starter_exited", CI, "c1"),
    _t(CC, "evict_vacate", PV, "c2"),
    _t(CC, "evict_kill", PK, "c2"),
    _t(CB, "retire", CR, "13"),
    # condor_startd 25: a preempting claim that finds no retirement left (MaxJobRetirement-
    # Time 0, or no more than the vacate time; ResState::eval_policy, whose source counts
    # it with 17 and 18), and kill_claim (lease expired, released, fast vacate, drain or
    # shutdown) move a busy slot straight to Preempting, without Retiring
    _t(CB, "evict_vacate", PV, "p1"),
    _t(CB, "evict_kill", PK, "p1"),
    _t(CB, "suspend", CS, "14"),
    _t(CS, "continue", CB, "15"),
    _t(CS, "continue_retiring", CR, "16"),
    _t(CS, "retire", CR, "16"),
    _t(CS, "evict_vacate", PV, "17"),
    _t(CS, "evict_kill", PK, "17"),
    _t(CR, "evict_vacate", PV, "18"),
    _t(CR, "evict_kill", PK, "18"),
    _t(CR, "job_exited", CC, "18"),
    _t(CR, "unretire", CB, "19"),
    _t(CR, "suspend", CS, "20"),
    _t(PV, "kill", PK, "21"),
    _t(PV, "starter_exited", OI, "22"),
    _t(PV, "starter_exited_preempting_claim", CI, "23"),
    _t(PK, "starter_exited_preempting_claim", CI, "24"),
    _t(PK, "starter_exited", OI, "25"),
    _t(BI, "backfill_spawned", BB, "26"),
    _t(BB, "backfill_client_exited", BI, "27"),
    _t(BB, "evict_backfill", BK, "28"),
    _t(BK, "backfill_client_exited", BI, "29"),
    # one client serves every backfill slot: a slot leaving while others still use the
    # client is released at once, without killing it (seed 003 "Backfill State")
    _t(BK, "backfill_slot_released", BI, "29"),
    _t(BI, "backfill_to_owner", OI, "30"),
    _t(BI, "backfill_to_claimed", CI, "31"),
    _t(BI, "backfill_to_matched", MI, "32"),
    _t(DR, "drain_complete", DI, "33"),
    _t(DI, "drain_finished", OI, "34"),
    _t(DR, "drain_cancelled", OI, "35"),
    _t(DI, "drain_cancelled", OI, "34"),
    _t(OI, "drain", DR, "36"),
    _t(UI, "drain", DR, "37"),
    # HTCondor 25 dynamic slots (HTCONDOR_BEHAVIOUR.md): born in Owner, claimed at once.
    _t(OI, "dslot_claimed", CI, "d1"),
)

_INDEX: dict[tuple[tuple[State, Activity], str], Transition] = {
    (t.source, t.trigger): t for t in TRANSITIONS
}


def lookup(state: State, activity: Activity, trigger: str) -> Transition:
    """The entry for ``trigger`` in (state, activity); PolicyError when there is none."""
    try:
        return _INDEX[((state, activity), trigger)]
    except KeyError:
        raise PolicyError(
            f"no transition from {label(state, activity)} on {trigger!r}"
        ) from None


def allowed(state: State, activity: Activity, trigger: str) -> bool:
    return ((state, activity), trigger) in _INDEX

# The state-level edges of seed 003's "Machine States" figure, lettered in the order
# the text describes them (by source state; the two drain edges came last, O and P).
STATE_EDGES: dict[tuple[State, State], str] = {
    (S.OWNER, S.UNCLAIMED): "A",
    (S.UNCLAIMED, S.OWNER): "B",
    (S.UNCLAIMED, S.MATCHED): "C",
    (S.UNCLAIMED, S.CLAIMED): "D",
    (S.UNCLAIMED, S.BACKFILL): "E",
    (S.MATCHED, S.OWNER): "F",
    (S.MATCHED, S.CLAIMED): "G",
    (S.CLAIMED, S.PREEMPTING): "H",
    (S.PREEMPTING, S.CLAIMED): "I",
    (S.PREEMPTING, S.OWNER): "J",
    (S.BACKFILL, S.OWNER): "K",
    (S.BACKFILL, S.MATCHED): "L",
    (S.BACKFILL, S.CLAIMED): "M",
    (S.DRAINED, S.OWNER): "N",
    (S.OWNER, S.DRAINED): "O",
    (S.UNCLAIMED, S.DRAINED): "P",
}


def state_edge(t: Transition) -> str | None:
    """The letter of the state-level edge a transition crosses (None within a state)."""
    return STATE_EDGES.get((t.source[0], t.target[0]))
