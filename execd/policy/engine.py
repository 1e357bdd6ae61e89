"""The startd policy engine: sans-IO. Events in, actions out, ``now`` passed in.

Each public method handles one event for one slot (or all slots) and returns the
actions the daemon must carry out, including LogEvent records. :meth:`evaluate`
runs the periodic policy pass; :meth:`next_evaluation_due` says when it is due.
"""

from __future__ import annotations

from typing import Any

from execd import classads
from execd.claims.ids import ClaimId
from execd.errors import PolicyError
from execd.policy import actions as act
from execd.policy import backfill, claiming, drain, drain_estimates, preempting, retirement
from execd.policy.adcache import AdCache, own_facts, references
from execd.policy.config import PolicyConfig
from execd.policy.evaluate import evaluate_slot
from execd.policy.slot import (
    FOR_PREEMPTING_CLAIM,
    Now,
    Slot,
    slot_policy_attributes,
)
from execd.policy.states import VALID_PAIRS, Activity, State, label
from execd.policy.transitions import lookup, state_edge

S, A = State, Activity
Actions = list[act.Action]
_BOOL_EXPRS = frozenset({"START", "IS_OWNER", "SUSPEND", "CONTINUE", "PREEMPT", "KILL",
                         "WANT_SUSPEND", "WANT_VACATE", "RUNBENCHMARKS", "START_BACKFILL",
                         "EVICT_BACKFILL", "WANT_HOLD", "CPUBusy"})


class PolicyEngine:
    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.slots: dict[str, Slot] = {}
        self.shutting_down: str | None = None
        self.draining = False
        self.drain_reason = ""
        self.drain_resume = False
        self.draining_badput = 0.0  # TotalMachineDrainingBadput (cpu-seconds)
        self.draining_unclaimed = 0.0  # TotalMachineDrainingUnclaimedTime (cpu-seconds)
        self.drain_estimate = drain_estimates.DrainEstimate()  # as of the last pass
        self.scavenging = False  # draining under a start expression (drain.py)
        self.start_override: tuple[Any, str] | None = None  # (expression, text) for START
        self.backfill_client = backfill.STOPPED  # the daemon's one client: stopped/running/killing
        self._refs: dict[str, frozenset[str]] = {}
        self.adcache = AdCache(frozenset())
        self._index_references()

    def _index_references(self) -> None:
        """What each policy expression reads (adcache.py); after a reconfig or drain."""
        self._refs = {name: references(expr) for name, expr in self.config.expressions.items()}
        if self.start_override is not None:
            self._refs["START"] = references(self.start_override[0])
        self.adcache = AdCache(frozenset().union(*self._refs.values()))
        for slot in self.slots.values():
            slot.ad = None  # rebuilt, fully, at its next evaluation

    # ---- slots -------------------------------------------------------------------
    def add_slot(self, name: str, facts: dict[str, Any], now: Now, *,
                 dynamic: bool = False, parent: str | None = None) -> Actions:
        if name in self.slots:
            raise PolicyError(f"slot {name} exists already")
        self.slots[name] = Slot(name, own_facts(facts), S.OWNER, A.IDLE, now.mono, now.mono,
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
        """New resource facts (every poll): changed ones are written into the slot's ad."""
        slot = self.slot(name)
        self.adcache.update_facts(slot, facts)

    def attributes(self, name: str, now: Now) -> dict[str, Any]:
        """The policy attributes the slot publishes (merged into its ad by the daemon)."""
        slot = self.slot(name)
        attrs = slot_policy_attributes(slot, now, self.start_expr())
        if attrs["Requirements"] is not False and classads.evaluate(
                self.start_expr(), self.machine_ad(slot, now, full=True)) is True:
            attrs["Requirements"] = True  # START is true whatever the job (seed 000, 3.5.2)
        # as condor_startd: by default the negotiator preempts no slot with retirement
        # left (NEGOTIATOR_CONSIDER_EARLY_PREEMPTION)
        attrs["RetirementTimeRemaining"] = retirement.retirement_remaining(self, slot, now)
        attrs["TotalMachineDrainingBadput"] = int(self.draining_badput)
        attrs["TotalMachineDrainingUnclaimedTime"] = int(self.draining_unclaimed)
        attrs.update(self.drain_estimate.attributes())
        # published as configured, as condor_startd does (the negotiator's accounting
        # charges a claim its SlotWeight; condor_status shows the policy's times)
        attrs["SlotWeight"] = self.config.expr("SLOT_WEIGHT")
        attrs["MaxJobRetirementTime"] = self.config.expr("MAXJOBRETIREMENTTIME")
        attrs["MachineMaxVacateTime"] = self.config.expr("MachineMaxVacateTime")
        if self.draining:
            attrs["DrainReason"] = self.drain_reason
        return attrs

    def start_expr(self) -> Any:
        """START as it applies now: a drain's start expression replaces it while draining."""
        if self.start_override is not None:
            return self.start_override[0]
        return self.config.expr("START")

    # ---- evaluation helpers -------------------------------------------------------
    def machine_ad(self, slot: Slot, now: Now, *, full: bool = False) -> Any:
        """The slot's ad: its facts and policy attributes. Only the attributes policy
        expressions read are kept current unless ``full`` (see adcache.py)."""
        attrs = slot_policy_attributes(slot, now, self.start_expr())
        attrs["CurrentTime"] = attrs["MyCurrentTime"]
        return self.adcache.refresh(slot, attrs, full=full)

    def _eval(self, slot: Slot, name: str, my: Any, target: Any, out: Actions) -> Any:
        cfg = self.config
        vanilla = False
        if cfg.has_vanilla and target is not None:  # a lookup costs: only when it matters
            vanilla = target.get("JobUniverse") == 5
        if name == "START" and self.start_override is not None:
            expr, text = self.start_override
        else:
            if not vanilla and name in cfg.constants:
                return cfg.constants[name]  # a literal True/False: nothing to evaluate
            expr, text = cfg.expr(name, vanilla), ""
        if target is not None and my is slot.ad and not vanilla \
                and self.adcache.target_free(slot, name, self._refs[name]):
            target = None  # the same value, at a tenth of the cost
        value = classads.evaluate(expr, my, target)
        bad = classads.is_error(value) or (
            name in _BOOL_EXPRS and not classads.is_undefined(value)
            and not isinstance(value, bool | int | float))
        if bad:
            key = (name, text or self.config.text(name, vanilla))
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
        if slot.drain_mark is not None:
            drain.account_unclaimed(self, slot, now)  # the time up to now in the old state
        old = label(slot.state, slot.activity)
        new_state, new_activity = t.target
        assert (new_state, new_activity) in VALID_PAIRS
        slot.leave_activity(now.mono)
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
        self._check_scavenging(now, out)
        for slot in list(self.slots.values()):
            out += self._evaluate_slot(slot, now)
        self.drain_estimate = drain_estimates.estimate(self, now, self.drain_estimate)
        return out

    tick = evaluate

    def next_evaluation_due(self, last: float) -> float:
        """POLLING_INTERVAL while any slot is claimed, else UPDATE_INTERVAL (seed 000)."""
        busy = any(s.state in (S.CLAIMED, S.PREEMPTING) for s in self.slots.values())
        key = "POLLING_INTERVAL" if busy else "UPDATE_INTERVAL"
        return last + self.config.number(key)

    def _evaluate_slot(self, slot: Slot, now: Now) -> Actions:

        return evaluate_slot(self, slot, now)

    # ---- claims (execd/policy/claiming.py) ----------------------------------------
    def match(self, name: str, now: Now) -> Actions:
        return claiming.match(self, self.slot(name), now)

    def request_claim(self, name: str, claim_id: ClaimId, request_ad: Any, now: Now, *,
                      alive_interval: float | None = None,
                      user_priority: bool = False) -> tuple[bool, Actions]:
        """A schedd claims the slot; returns (accepted, actions). ``user_priority``: a
        negotiator's preempting claim, which an equal RANK suffices for."""
        return claiming.request_claim(self, self.slot(name), claim_id, request_ad, now,
                                      alive_interval=alive_interval, user_priority=user_priority)

    def carve_refusal(self, name: str, request_ad: Any, now: Now) -> tuple[str | None, Actions]:
        """Why a claim may not carve a d-slot from partitionable slot NAME (None: it may)."""
        return claiming.carve_refusal(self, self.slot(name), request_ad, now)

    def alive(self, name: str, now: Now, claim_id: ClaimId | None = None) -> Actions:
        claiming.alive(self.slot(name), now, claim_id)
        return []

    def activate(self, name: str, job_ad: Any, now: Now) -> tuple[bool, Actions]:
        return claiming.activate(self, self.slot(name), job_ad, now)

    def job_exited(self, name: str, now: Now) -> Actions:
        """The job ended; the starter cleans up (Claimed/Cleaning) until it exits."""
        return claiming.job_exited(self, self.slot(name), now)

    def starter_exited(self, name: str, now: Now) -> Actions:
        """The starter is gone (job done, or evicted)."""
        return claiming.starter_exited(self, self.slot(name), now)

    def release(self, name: str, now: Now, claim_id: ClaimId | None = None) -> Actions:
        """The claim holder releases the claim (RELEASE_CLAIM), or a preempting one."""
        return claiming.release(self, self.slot(name), now, claim_id)

    def withdraw_preempting_claim(self, name: str, now: Now) -> Actions:
        """The preempting claim waiting for this slot went away: unretire (19)."""
        return claiming.withdraw_preempting_claim(self, self.slot(name), now)

    def deactivate(self, name: str, now: Now, *, fast: bool = False) -> Actions:
        """DEACTIVATE_CLAIM: stop the job (soft, or hard if ``fast``) but keep the claim."""
        return claiming.deactivate(self, self.slot(name), now, fast)

    def vacate(self, name: str, now: Now, *, fast: bool = False, resumed: bool = False) -> Actions:
        """condor_vacate: gracefully (after retirement, soft kill) or fast (hard kill);
        `resumed`: a restarted daemon goes on with an eviction under way (claiming.vacate)."""
        return claiming.vacate(self, self.slot(name), now, fast, resumed)

    # ---- moves shared by events and evaluation -------------------------------------
    def _retire(self, slot: Slot, reason: str, now: Now, out: Actions) -> None:
        slot.vacate_cause = reason  # the latest cause, whoever retires it first
        if slot.retire_reason is None or slot.retire_reason == FOR_PREEMPTING_CLAIM:
            slot.retire_reason = reason
        if slot.activity == A.BUSY:
            self._move(slot, "retire", now, out)
        elif slot.activity == A.SUSPENDED:
            self._move(slot, "retire", now, out)
            self._resume(slot, now, out)

    def _suspend(self, slot: Slot, now: Now, out: Actions) -> None:
        """Busy/Retiring -> Suspended (14/20). The retirement's cause no longer counts:
        condor_startd clears the vacate reason as the slot leaves Retiring this way, and
        CONTINUE takes it back to Retiring without one, so the eviction at its end gives
        none (measured: a drained job suspended and continued is told 1005, not 1014);
        a cause that comes after gives its own (_evict)."""
        self._move(slot, "suspend", now, out)
        slot.suspended_since = now.mono
        slot.vacate_cause = None
        out.append(act.Suspend(slot.name))

    def _resume(self, slot: Slot, now: Now, out: Actions) -> None:
        slot.suspended_by_command = False
        if slot.suspended_since is not None:
            slot.job_suspend_total += now.mono - slot.suspended_since
            slot.suspended_since = None
            out.append(act.Continue(slot.name))

    def _evict(self, slot: Slot, now: Now, out: Actions, reason: str, *,
               kill: bool = False, retire: bool = False, retirement_end: bool = False) -> None:
        """Claimed/* -> Preempting/Vacating (WANT_VACATE) or Preempting/Killing. A busy
        slot passes a zero-length Claimed/Retiring on the way when ``retire`` (condor_
        startd's retire_claim: condor_vacate, a quick drain); otherwise it goes straight
        from Busy (p1), as condor_startd's kill_claim (lease expired, released, fast
        vacate, drain or shutdown) and a preempting claim with no retirement left.
        ``retirement_end``: the retirement's own end (its time is over, or its job ended),
        which gives no cause of its own: the latest one stands (none, if a suspension
        cleared it); any other eviction is the latest cause, even one named as the
        retirement's (condor_vacate -fast after condor_vacate, SIGQUIT after SIGTERM)."""
        slot.evict_reason = reason
        if not retirement_end:
            slot.vacate_cause = reason
        if reason == "drain":
            drain.add_badput(self, slot, now)
        if slot.activity == A.BUSY and retire:
            slot.retire_reason = slot.retire_reason or reason
            self._move(slot, "retire", now, out)
        if not kill and slot.starter_running:
            kill = not self._true(slot, "WANT_VACATE", self.machine_ad(slot, now), slot.job_ad, out)
        self._move(slot, "evict_kill" if kill else "evict_vacate", now, out)
        if slot.starter_running:
            self._resume(slot, now, out)
            if slot.job_ad is not None:  # not while Cleaning: that job ended on its own
                self._maybe_hold(slot, now, out)
            if kill:
                out.append(act.HardKill(slot.name))
            else:
                slot.vacate_deadline = now.mono + retirement.vacate_time(self, slot, now)
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

    def _finish_preempting(self, slot: Slot, now: Now, out: Actions) -> None:
        old = slot.claim
        if old is not None:
            out.append(act.NotifyClaimHolder(slot.name, str(old.id), slot.evict_reason or ""))
            slot.claim_run_total = slot.claim_suspend_total = 0.0
        slot.retire_reason = slot.evict_reason = slot.vacate_deadline = None
        slot.vacate_cause = None
        slot.preemption_badput = False
        slot.retirement_override = None if self.shutting_down is None else \
            slot.retirement_override
        slot.starter_family_killed = False
        if preempting.may_take_slot(self, slot, now, out):
            preempting.take_slot(slot, now, out)
            self._move(slot, "starter_exited_preempting_claim", now, out)
        else:
            preempting.drop_preempting_claim(slot, "shutdown", out)
            slot.claim = None
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
        return backfill.leave_backfill(self, slot, now)

    def _check_scavenging(self, now: Now, out: Actions) -> None:
        drain.check_scavenging(self, now, out)

    # ---- daemon-wide events -------------------------------------------------------
    def benchmarks_done(self, name: str, now: Now) -> Actions:
        out: Actions = []
        self._move(self.slot(name), "benchmarks_done", now, out)
        return out

    def backfill_client_exited(self, now: Now) -> Actions:
        """The daemon's backfill client exited: 29 (we killed it) or 27 (on its own)."""
        touched = [s for s in self.slots.values() if s.state == S.BACKFILL]
        out = backfill.client_exited(self, now)
        for slot in touched:
            if slot.name in self.slots:
                out += evaluate_slot(self, slot, now)
        return out

    def reconfig(self, config: PolicyConfig, now: Now) -> Actions:
        """New policy: re-evaluate every slot at once (HTCONDOR_BEHAVIOUR.md)."""
        self.config = config
        self._index_references()
        return self.evaluate(now)

    def shutdown(self, mode: str, now: Now) -> Actions:
        """graceful: retire then vacate; peaceful: infinite retirement; fast: kill."""
        return drain.shutdown(self, mode, now)

    def drain(self, mode: str, now: Now, *, reason: str = "", check: str | None = None,
              start: str | None = None, resume_on_completion: bool = False) -> Actions:
        """Drain every slot: graceful (retirement honoured), quick (vacate), fast (kill);
        ``start`` replaces START while draining (graceful only)."""
        return drain.drain(self, mode, now, reason=reason, check=check, start=start,
                           resume_on_completion=resume_on_completion)

    def cancel_drain(self, now: Now) -> Actions:
        """Drained -> Owner (34/35) -> Unclaimed at the next evaluation."""
        return drain.cancel_drain(self, now)
