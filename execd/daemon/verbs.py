"""The control socket's verbs: what each command does to the daemon, and who may ask.

Each verb checks its arguments (a bad one is ControlError "bad_args", naming it) and
calls into the daemon's parts; the control server (execd.daemon.control) authenticates
the peer and enforces the verb's role. Pool mode maps CEDAR commands onto these too.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Any

from execd.classads import ad_to_json
from execd.daemon.control import ControlError, Request, Role, Verb
from execd.daemon.policy_glue import now
from execd.daemon.who import running_jobs
from execd.errors import ExecdError

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon


def control_verbs(daemon: Daemon) -> dict[str, Verb]:
    """Every verb of the control socket, bound to `daemon`."""

    async def status(request: Request) -> Any:
        constraint = request.args.get("constraint")
        ads = daemon.ads()
        if constraint is not None:
            if not isinstance(constraint, str):
                raise ControlError("bad_args", "'constraint' must be a string")
            from execd.slots.status_view import select  # noqa: PLC0415

            try:
                ads = select(ads, constraint)
            except ExecdError as exc:
                raise ControlError("bad_args", str(exc)) from None
        return {"ads": [ad_to_json(ad) for ad in ads]}

    async def ping(_request: Request) -> Any:
        return {
            "pid": os.getpid(),
            "started": daemon.started,
            "recovered": daemon.recovered,
            "uptime": time.time() - daemon.started,
            "reloads": daemon.reloads,
            "config": str(daemon.config_path),
            # for leak checks: open descriptors and live asyncio tasks
            "fds": len(os.listdir("/proc/self/fd")),
            "tasks": len(asyncio.all_tasks()),
        }

    async def reconfig(_request: Request) -> Any:
        if not daemon.reload():
            raise ControlError("refused", "the new configuration is invalid; see the log")
        return {"reloaded": True}

    async def off(request: Request) -> Any:
        how = request.args.get("how", "graceful")
        if how not in ("graceful", "peaceful", "fast"):
            raise ControlError("bad_args", f"unknown shutdown {how!r}")
        daemon.begin_shutdown(how)
        return {"shutting_down": how}

    async def request_claim(request: Request) -> Any:
        job = request.args.get("job", {})
        slot = request.args.get("slot")
        if not isinstance(job, dict) or not (slot is None or isinstance(slot, str)):
            raise ControlError("bad_args", "'job' must be an object and 'slot' a string")
        return daemon.jobs.request_claim(slot, job)

    async def activate(request: Request) -> Any:
        job = request.args.get("job", {})
        if not isinstance(job, dict):
            raise ControlError("bad_args", "'job' must be an object")
        job.setdefault("Owner", request.peer.user)
        if request.peer.uid != 0 and job["Owner"] != request.peer.user:
            raise ControlError("permission_denied", "a job may only run as its submitter")
        return daemon.jobs.activate(request.args.get("claim_id"), job)

    async def release(request: Request) -> Any:
        return daemon.jobs.release(request.args.get("claim_id"))

    async def vacate_claim(request: Request) -> Any:
        return daemon.jobs.signal_job(request.args.get("claim_id"), "vacate")

    async def alive(request: Request) -> Any:
        return daemon.jobs.signal_job(request.args.get("claim_id"), "alive")

    async def job_result(request: Request) -> Any:
        return await daemon.jobs.result(request.args.get("job_id"),
                                        bool(request.args.get("wait", False)),
                                        bool(request.args.get("ack", False)))

    def claim_verb(verb: str) -> Any:
        async def handler(request: Request) -> Any:
            return daemon.jobs.signal_job(request.args.get("claim_id"), verb)
        return handler

    async def match(request: Request) -> Any:
        return daemon.jobs.matches.match(request.args.get("slot"))

    async def restart(_request: Request) -> Any:
        daemon.begin_shutdown("restart")
        return {"restarting": True, "pid": os.getpid()}

    async def who(_request: Request) -> Any:
        return {"jobs": running_jobs(daemon.jobs)}

    async def drain(request: Request) -> Any:
        how = request.args.get("how", "graceful")
        reason = request.args.get("reason", "")
        check = request.args.get("check")
        start = request.args.get("start")
        resume = request.args.get("resume_on_completion", False)
        if how not in ("graceful", "quick", "fast") or not isinstance(reason, str) \
                or not all(e is None or isinstance(e, str) for e in (check, start)):
            raise ControlError("bad_args", "drain takes how (graceful, quick or fast), "
                               "reason (a string), check and start (expressions)")
        try:
            actions = daemon.engine.drain(how, now(), reason=reason, check=check,
                                          start=start, resume_on_completion=bool(resume))
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        daemon.execute(actions)
        daemon.jobs.record_drain(how, reason, bool(resume))
        return {"draining": how, "reason": reason}

    async def cancel_drain(_request: Request) -> Any:
        try:
            daemon.execute(daemon.engine.cancel_drain(now()))
        except ExecdError as exc:
            raise ControlError("refused", str(exc)) from None
        daemon.jobs.forget_drain()
        return {"draining": False}

    async def vacate(request: Request) -> Any:
        fast = bool(request.args.get("fast", False))
        slot = request.args.get("slot")
        names = [slot] if isinstance(slot, str) else [
            n for n, s in daemon.engine.slots.items() if s.state.value == "Claimed"]
        vacated = []
        for name in names:
            if name not in daemon.engine.slots:
                raise ControlError("bad_args", f"no slot named {name!r}")
            try:
                daemon.execute(daemon.engine.vacate(name, now(), fast=fast))
            except ExecdError as exc:
                raise ControlError("refused", str(exc)) from None
            vacated.append(name)
        return {"vacated": vacated, "fast": fast}

    admin = {
        "drain": Verb(drain, Role.ADMIN, "drain the node: graceful, quick or fast"),
        "cancel_drain": Verb(cancel_drain, Role.ADMIN, "stop draining"),
        "vacate": Verb(vacate, Role.ADMIN, "vacate one slot's job, or every claimed slot's"),
        "restart": Verb(restart, Role.ADMIN, "restart in place; running jobs are re-adopted"),
    }
    claims = {
        "request_claim": Verb(request_claim, Role.SCHEDULER, "claim a slot (carves a d-slot)"),
        "activate": Verb(activate, Role.SCHEDULER, "run a job on a claim"),
        "release": Verb(release, Role.SCHEDULER, "release a claim"),
        "vacate_claim": Verb(vacate_claim, Role.SCHEDULER, "vacate the job on a claim"),
        "alive": Verb(alive, Role.SCHEDULER, "keep a claim alive"),
        "match": Verb(match, Role.SCHEDULER, "match notification: the slot waits in Matched"),
        "suspend": Verb(claim_verb("suspend"), Role.SCHEDULER, "suspend the claim's job"),
        "continue": Verb(claim_verb("continue"), Role.SCHEDULER, "continue a suspended job"),
        "deactivate": Verb(claim_verb("deactivate"), Role.SCHEDULER,
                           "end the job (soft kill), keep the claim"),
        "deactivate_forcefully": Verb(claim_verb("deactivate_forcefully"), Role.SCHEDULER,
                                      "end the job (hard kill), keep the claim"),
        "job_result": Verb(job_result, Role.READ, "a job's outcome (wait: true blocks)"),
        "who": Verb(who, Role.READ, "running jobs"),
    }
    return {
        **claims,
        **admin,
        "status": Verb(status, Role.READ, "slot ads, optionally filtered by a constraint"),
        "ping": Verb(ping, Role.READ, "daemon pid, uptime and config"),
        "reconfig": Verb(reconfig, Role.ADMIN, "reread the configuration"),
        "off": Verb(off, Role.ADMIN, "shut down: graceful, peaceful or fast"),
    }
