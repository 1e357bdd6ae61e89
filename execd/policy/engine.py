"""The startd policy engine: sans-IO. Events in, actions out, ``now`` passed in.

Each public method handles one event for one slot (or all slots) and returns the
actions the daemon must carry out, including LogEvent records. :meth:`evaluate`
runs the periodic policy pass; :meth:`next_evaluation_due` says when it is due.
"""

from __future__ import annotations

import math
from typing import Any

from execd import classads
from execd.claims.ids import ClaimId
from execd.claims.lease import Lease, lease_duration
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy import drain
from execd.policy.config import PolicyConfig
from execd.policy.evaluate import evaluate_slot, leave_backfill_idle
from execd.policy.slot import Claim, Now, Slot, slot_policy_attributes
from execd.policy.states import VALID_PAIRS, Activity, State, label
from execd.policy.transitions import lookup, state_edge

S, A = State, Activity
Actions = list[act.Action]
_BOOL_EXPRS = frozenset({"START", "IS_OWNER", "SUSPEND", "CONTINUE", "PREEMPT", "KILL",
                         "WANT_SUSPEND", "WANT_VACATE", "RUNBENCHMARKS", "START_BACKFILL",
                         "EVICT_BACKFILL", "WANT_HOLD"})


def _as_ad(ad: Any) -> Any:
    return classads.new_ad(ad) if isinstance(ad, dict) else ad


class PolicyEngine:
    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.slots: dict[str, Slot] = {}
        self.shutting_down: str | None = None
        self.draining = False
        self.drain_reason = ""
        self.drain_resume = False
        self.draining_badput = 0.0  # TotalMachineDrainingBadput: job time thrown away

    # ---- slots -------------------------------------------------------------------
    def add_slot(self, name: str, facts: dict[str, Any], now: Now, *,
                 dynamic: bool = False, parent: str | None = None) -> Actions:
        if name in self.slots:
            raise PolicyError(f"slot {name} exists already")
        self.slots[name] = Slot(name, dict(facts), S.OWNER, A.IDLE, now.mono, now.mono,
                                now.wall, now.wall, dynamic=dynamic, parent=parent)
        if dynamic:
            return [act.PublishAd(name)]
        return [*self._evaluate_slot(self.slots[name], now), act.PublishAd(name)]

    def slot(self, name: str) -> Slot:
        try:
            return self.slots[name]
        except KeyError:
            raise PolicyError(f"no slot named {name}") from None

    def set_facts(self, name: str, facts: dict[str, Any]) -> None:
        slot = self.slot(name)
        slot.facts, slot.ad = dict(facts), None

    def attributes(self, name: str, now: Now) -> dict[str, Any]:
        attrs = slot_policy_attributes(self.slot(name), now, self.config.expr("START"))
        attrs["TotalMachineDrainingBadput"] = int(self.draining_badput)
        if self.draining:
            attrs["DrainReason"] = self.drain_reason
        return attrs

    # ---- evaluation helpers -------------------------------------------------------
    def machine_ad(self, slot: Slot, now: Now) -> Any:
        """The slot's ad: facts (built once per set_facts) updated with policy attributes."""
        if slot.ad is None:
            slot.ad, slot.ad_policy_values = classads.new_ad(slot.facts), {}
        attrs = slot_policy_attributes(slot, now, self.config.expr("START"))
        attrs["CurrentTime"] = attrs["MyCurrentTime"]
        last = slot.ad_policy_values
        for gone in last.keys() - attrs.keys():
            del slot.ad[gone]
        for key, value in attrs.items():
            # Setting a ClassAd attribute costs; most are unchanged between passes.
            if key not in last or (last[key] is not value and last[key] != value):
                slot.ad[key] = value
        slot.ad_policy_values = attrs
        return slot.ad

    def _eval(self, slot: Slot, name: str, my: Any, target: Any, out: Actions) -> Any:
        vanilla = target is not None and target.get("JobUniverse") == 5
        value = classads.evaluate(self.config.expr(name, vanilla), my, target)
        bad = classads.is_error(value) or (
            name in _BOOL_EXPRS and not classads.is_undefined(value)
            and not isinstance(value, bool | int | float))
        if bad:
            key = (name, self.config.text(name, vanilla))
            if key not in slot.logged_errors:  # once per slot per expression text
                slot.logged_errors.add(key)
                out.append(act.LogEvent("policy_expression_error", {
                    "slot": slot.name, "expression": name, "text": key[1],
                    "value": str(value)}))
        return value

    def _true(self, slot: Slot, name: str, my: Any, target: Any, out: Actions) -> bool:
        return classads.is_true(self._eval(slot, name, my, target, out))

    def _number(self, slot: Slot, name: str, my: Any, target: Any, out: Actions) -> float | None:
        return classads.to_number(self._eval(slot, name, my, target, out))

    def _move(self, slot: Slot, trigger: str, now: Now, out: Actions) -> None:
        t = lookup(slot.state, slot.activity, trigger)
        old = label(slot.state, slot.activity)
        new_state, new_activity = t.target
        assert (new_state, new_activity) in VALID_PAIRS
        if new_state != slot.state:
            slot.entered_state, slot.entered_state_wall = now.mono, now.wall
        slot.state, slot.activity = new_state, new_activity
        slot.entered_activity, slot.entered_activity_wall = now.mono, now.wall
        out.append(act.LogEvent("slot_state_changed", {
            "slot": slot.name, "old": old, "new": label(new_state, new_activity),
            "transition": t.number, "edge": state_edge(t), "trigger": trigger}))
        out.append(act.PublishAd(slot.name))

    # ---- the periodic pass ---------------------------------------------------------
    def evaluate(self, now: Now) -> Actions:
        """One policy pass over every slot (the tick)."""
        out: Actions = []
        for slot in list(self.slots.values()):
            out += self._evaluate_slot(slot, now)
        return out

    tick = evaluate

    def next_evaluation_due(self, last: float) -> float:
        """POLLING_INTERVAL while any slot is claimed, else UPDATE_INTERVAL (seed 000)."""
        busy = any(s.state in (S.CLAIMED, S.PREEMPTING) for s in self.slots.values())
        key = "POLLING_INTERVAL" if busy else "UPDATE_INTERVAL"
        return last + self.config.number(key)

    def _evaluate_slot(self, slot: Slot, now: Now) -> Actions:

        return evaluate_slot(self, slot, now)

    # ---- claims --------------------------------------------------------------------
    def match(self, name: str, now: Now) -> Actions:
        slot = self.slot(name)
        out: Actions = []
        if slot.state == S.BACKFILL:
            slot.backfill_leave_to = "matched"
            out += self._leave_backfill(slot, now)
        else:
            self._move(slot, "match", now, out)
        return out

    def request_claim(self, name: str, claim_id: ClaimId, request_ad: Any, now: Now, *,
                      alive_interval: float | None = None) -> tuple[bool, Actions]:
        """A schedd claims the slot; returns (accepted, actions)."""
        slot = self.slot(name)
        out: Actions = []
        job = _as_ad(request_ad)
        my = self.machine_ad(slot, now)
        if not self._true(slot, "START", my, job, out):
            out.append(act.LogEvent("claim_refused", {"slot": name, "why": "START is not true"}))
            return False, out
        rank = self._number(slot, "RANK", my, job, out) or 0.0
        alive = self.config.number("ALIVE_INTERVAL") if alive_interval is None else alive_interval
        jld = classads.to_number(job.get("JobLeaseDuration"))
        lease = Lease(lease_duration(jld, alive, self.config.number("MAX_CLAIM_ALIVES_MISSED")),
                      now.mono)
        claim = Claim(claim_id, job, rank, lease, now.mono)
        if slot.state in (S.UNCLAIMED, S.MATCHED) or (slot.dynamic and slot.state == S.OWNER):
            trigger = "dslot_claimed" if slot.state == S.OWNER else "claim"
            slot.claim, slot.claimed_once = claim, True
            self._move(slot, trigger, now, out)
            return True, out
        if slot.state == S.BACKFILL:
            slot.preempting_claim = claim
            slot.backfill_leave_to = "claimed"
            return True, out + self._leave_backfill(slot, now)
        if slot.state == S.CLAIMED and slot.claim is not None and rank > slot.claim.rank \
                and slot.preempting_claim is None:
            slot.preempting_claim = claim
            out.append(act.LogEvent("preempting_claim", {
                "slot": name, "why": "preempting claim based on machine rank"}))
            if slot.activity == A.IDLE:
                self._evict(slot, now, out, "rank")
            elif slot.activity in (A.BUSY, A.SUSPENDED):
                self._retire(slot, "rank", now, out)
            out += evaluate_slot(self, slot, now)
            return True, out
        why = f"slot is {slot.state.value}"
        out.append(act.LogEvent("claim_refused", {"slot": name, "why": why}))
        return False, out

    def alive(self, name: str, now: Now) -> Actions:
        slot = self.slot(name)
        if slot.claim is not None:
            slot.claim.lease.renew(now.mono)
        return []

    def activate(self, name: str, job_ad: Any, now: Now) -> tuple[bool, Actions]:
        slot = self.slot(name)
        out: Actions = []
        job = _as_ad(job_ad)
        if slot.state != S.CLAIMED or slot.activity != A.IDLE or slot.claim is None:
            raise PolicyError(f"cannot activate {name} in {label(slot.state, slot.activity)}")
        worklife = self._number(slot, "CLAIM_WORKLIFE", self.machine_ad(slot, now), job, out)
        if worklife is not None and worklife >= 0 and slot.claim.jobs_run > 0 \
                and now.mono - slot.claim.created > worklife:
            out.append(act.LogEvent("activation_refused", {"slot": name, "why": "CLAIM_WORKLIFE"}))
            return False, out
        if not self._true(slot, "START", self.machine_ad(slot, now), job, out):
            why = "START is not true"
            out.append(act.LogEvent("activation_refused", {"slot": name, "why": why}))
            return False, out
        slot.job_ad, slot.job_start, slot.job_start_wall = job, now.mono, now.wall
        slot.job_suspend_total, slot.suspended_since = 0.0, None
        slot.claim.jobs_run += 1
        slot.starter_running = True
        self._move(slot, "activate", now, out)
        out.append(act.SpawnStarter(name, str(slot.claim.id)))
        return True, out

    def starter_exited(self, name: str, now: Now) -> Actions:
        """The starter is gone (job done, or evicted)."""
        slot = self.slot(name)
        out: Actions = []
        slot.starter_running = False
        self._end_job(slot, now)
        if slot.state == S.CLAIMED:
            if slot.activity == A.SUSPENDED:
                slot.activity = A.BUSY  # a suspended job can only exit by being killed
            self._move(slot, "starter_exited", now, out)
            if slot.retire_reason is not None and slot.retire_reason != "rank":
                self._evict(slot, now, out, slot.retire_reason)
            elif slot.preempting_claim is not None:
                self._evict(slot, now, out, "rank")
        elif slot.state == S.PREEMPTING:
            self._finish_preempting(slot, now, out)
        else:
            raise PolicyError(f"starter exited on {name} in {label(slot.state, slot.activity)}")
        return out + evaluate_slot(self, slot, now)

    def release(self, name: str, now: Now) -> Actions:
        """The claim holder releases the claim (RELEASE_CLAIM)."""
        slot = self.slot(name)
        out: Actions = []
        if slot.state != S.CLAIMED:
            raise PolicyError(f"cannot release {name} in {label(slot.state, slot.activity)}")
        self._evict(slot, now, out, "released", kill=True)
        return out

    def vacate(self, name: str, now: Now, *, fast: bool = False) -> Actions:
        """condor_vacate: gracefully (retirement skipped, soft kill) or fast (hard kill)."""
        slot = self.slot(name)
        out: Actions = []
        if slot.state == S.CLAIMED:
            self._evict(slot, now, out, "vacate", kill=fast)
        elif slot.state == S.BACKFILL:
            slot.backfill_leave_to = "owner"
            out += self._leave_backfill(slot, now)
        return out

    # ---- moves shared by events and evaluation -------------------------------------
    def _retire(self, slot: Slot, reason: str, now: Now, out: Actions) -> None:
        if slot.retire_reason is None or slot.retire_reason == "rank":
            slot.retire_reason = reason
        if slot.activity == A.BUSY:
            self._move(slot, "retire", now, out)
        elif slot.activity == A.SUSPENDED:
            self._move(slot, "retire", now, out)
            self._resume(slot, now, out)

    def _resume(self, slot: Slot, now: Now, out: Actions) -> None:
        slot.suspended_by_command = False
        if slot.suspended_since is not None:
            slot.job_suspend_total += now.mono - slot.suspended_since
            slot.suspended_since = None
            out.append(act.Continue(slot.name))

    def _evict(
        self, slot: Slot, now: Now, out: Actions, reason: str, *, kill: bool = False
    ) -> None:
        """Claimed/* -> Preempting/Vacating (WANT_VACATE) or Preempting/Killing."""
        slot.evict_reason = reason
        if reason == "drain" and slot.job_start is not None:
            self.draining_badput += slot.job_run_time(now.mono)
        if slot.activity == A.BUSY:  # zero-length Retiring, as HTCondor 25 does
            slot.retire_reason = slot.retire_reason or reason
            self._move(slot, "retire", now, out)
        if not kill and slot.starter_running:
            kill = not self._true(slot, "WANT_VACATE", self.machine_ad(slot, now), slot.job_ad, out)
        self._move(slot, "evict_kill" if kill else "evict_vacate", now, out)
        if slot.starter_running:
            self._resume(slot, now, out)
            self._maybe_hold(slot, now, out)
            if kill:
                out.append(act.HardKill(slot.name))
            else:
                slot.vacate_deadline = now.mono + self.vacate_time(slot, now)
                out.append(act.SoftKill(slot.name))
        else:  # no starter: the Preempting state's work is already done (seed 000)
            self._finish_preempting(slot, now, out)

    def _maybe_hold(self, slot: Slot, now: Now, out: Actions) -> None:
        my = self.machine_ad(slot, now)
        if not self._true(slot, "WANT_HOLD", my, slot.job_ad, out):
            return
        reason = self._eval(slot, "WANT_HOLD_REASON", my, slot.job_ad, out)
        subcode = classads.to_number(self._eval(slot, "WANT_HOLD_SUBCODE", my, slot.job_ad, out))
        text = reason if isinstance(reason, str) else "The startd put this job on hold"
        out.append(act.HoldJob(slot.name, text, int(subcode or 0)))

    def vacate_time(self, slot: Slot, now: Now) -> float:
        """MachineMaxVacateTime, lowered by JobMaxVacateTime, or raised out of retirement."""
        out: Actions = []
        machine = self._number(slot, "MachineMaxVacateTime", self.machine_ad(slot, now),
                               slot.job_ad, out) or 0.0
        job = None if slot.job_ad is None else classads.to_number(
            classads.evaluate(slot.job_ad.lookup("JobMaxVacateTime"), slot.job_ad)) \
            if "JobMaxVacateTime" in slot.job_ad else None
        if job is None:
            return machine
        if job <= machine:
            return job
        return max(machine, min(job, self.retirement_left(slot, now)))

    def retirement_time(self, slot: Slot, now: Now) -> float:
        """MAXJOBRETIREMENTTIME; the job may lower it, never raise it."""
        if slot.retirement_override is not None:
            return slot.retirement_override
        out: Actions = []
        machine = self._number(slot, "MAXJOBRETIREMENTTIME", self.machine_ad(slot, now),
                               slot.job_ad, out) or 0.0
        if slot.job_ad is not None and "MaxJobRetirementTime" in slot.job_ad:
            job = classads.to_number(classads.evaluate(
                slot.job_ad.lookup("MaxJobRetirementTime"), slot.job_ad,
                self.machine_ad(slot, now)))
            if job is not None:
                return min(machine, job)
        return machine

    def retirement_left(self, slot: Slot, now: Now) -> float:
        total = self.retirement_time(slot, now)
        if math.isinf(total):
            return total
        return max(0.0, total - slot.job_run_time(now.mono))

    def _finish_preempting(self, slot: Slot, now: Now, out: Actions) -> None:
        old = slot.claim
        if old is not None:
            out.append(act.NotifyClaimHolder(slot.name, str(old.id), slot.evict_reason or ""))
            slot.claim_run_total = slot.claim_suspend_total = 0.0
        slot.retire_reason = slot.evict_reason = slot.vacate_deadline = None
        slot.starter_family_killed = False
        if slot.preempting_claim is not None and self.shutting_down is None:
            slot.claim, slot.preempting_claim = slot.preempting_claim, None
            slot.claim.lease.renew(now.mono)
            self._move(slot, "starter_exited_preempting_claim", now, out)
        else:
            slot.claim = slot.preempting_claim = None
            self._move(slot, "starter_exited", now, out)

    def _end_job(self, slot: Slot, now: Now) -> None:
        if slot.job_start is not None:
            slot.claim_run_total += slot.job_run_time(now.mono)
            if slot.suspended_since is not None:
                slot.job_suspend_total += now.mono - slot.suspended_since
            slot.claim_suspend_total += slot.job_suspend_total
        slot.job_ad = slot.job_start = slot.job_start_wall = slot.suspended_since = None
        slot.job_suspend_total = 0.0

    def _leave_backfill(self, slot: Slot, now: Now) -> Actions:
        out: Actions = []
        if slot.activity == A.BUSY:
            self._move(slot, "evict_backfill", now, out)
            out.append(act.KillBackfill(slot.name))
        elif slot.activity == A.IDLE:
            leave_backfill_idle(self, slot, now, out)
        return out

    # ---- daemon-wide events -------------------------------------------------------
    def benchmarks_done(self, name: str, now: Now) -> Actions:
        out: Actions = []
        self._move(self.slot(name), "benchmarks_done", now, out)
        return out

    def backfill_client_exited(self, name: str, now: Now) -> Actions:
        """The backfill client exited: 27 (on its own, respawned) or 29 (we killed it)."""
        slot = self.slot(name)
        out: Actions = []
        slot.backfill_running = False
        self._move(slot, "backfill_client_exited", now, out)
        return out + evaluate_slot(self, slot, now)

    def reconfig(self, config: PolicyConfig, now: Now) -> Actions:
        """New policy: re-evaluate every slot at once (HTCONDOR_BEHAVIOUR.md)."""
        self.config = config
        return self.evaluate(now)

    def shutdown(self, mode: str, now: Now) -> Actions:
        """graceful: retire then vacate; peaceful: infinite retirement; fast: kill."""
        return drain.shutdown(self, mode, now)

    def drain(self, mode: str, now: Now, *, reason: str = "", check: str | None = None,
              resume_on_completion: bool = False) -> Actions:
        """Drain every slot: graceful (retirement honoured), quick (vacate), fast (kill)."""
        return drain.drain(self, mode, now, reason=reason, check=check,
                           resume_on_completion=resume_on_completion)

    def cancel_drain(self, now: Now) -> Actions:
        """Drained -> Owner (34/35) -> Unclaimed at the next evaluation."""
        return drain.cancel_drain(self, now)
