"""`execd run`: the long-running daemon.

One asyncio process. Its main coroutine owns every task (a TaskGroup): the signal
consumer, the update timer, the watchdog pinger and the control socket's clients.
Signal handlers only enqueue (execd.daemon.signals); reload is parse, validate, diff,
apply, and a config that fails validation changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import time
from pathlib import Path
from typing import Any

from execd import log
from execd.classads import ClassAdError, ad_to_json, parse_expr
from execd.config.loader import Config, load_config
from execd.config.log_setup import configure_logging
from execd.config.settings import Settings, load_settings
from execd.daemon.backfill import BackfillClient, backfill_program
from execd.daemon.broken import record_broken
from execd.daemon.control import Authorizer, ControlError, ControlServer, Request, Role, Verb
from execd.daemon.fetch_work import FetchWorker
from execd.daemon.jobs import JobManager
from execd.daemon.node import Node, Paths
from execd.daemon.policy_glue import log_action, now, policy_config, slot_facts
from execd.daemon.pool import PoolMember, pool_member
from execd.daemon.recovery import recover
from execd.daemon.restart import reexec
from execd.daemon.sdnotify import Notifier, status_text
from execd.daemon.signals import Request as SignalRequest
from execd.daemon.signals import SignalQueue
from execd.daemon.who import running_jobs
from execd.errors import ConfigError, ExecdError
from execd.hooks.benchmarks import BenchmarkResult, BenchmarkRunner, runs_at_startup
from execd.hooks.cron import CronManager, CronUpdate
from execd.hooks.cron_config import cron_settings
from execd.policy import actions as act
from execd.policy.engine import PolicyEngine

logger = log.get_logger("daemon")


class Daemon:
    def __init__(self, config_path: Path, *, log_to_stderr: bool = False) -> None:
        self.config_path = config_path
        self.log_to_stderr = log_to_stderr
        self.notifier = Notifier()
        self.signals = SignalQueue()
        self.wake = asyncio.Event()
        self.stopping: str | None = None
        self.started = time.time()
        self.reloads = 0
        self.recovered: dict[str, int] = {}
        self.last_status = ""
        # set by start()
        self.config: Config
        self.settings: Settings
        self.engine: PolicyEngine
        self.jobs: JobManager
        self.cron: CronManager
        self.backfill: BackfillClient
        self.benchmarks: BenchmarkRunner
        self.fetch: FetchWorker
        self.paths: Paths
        self.node: Node
        self.control: ControlServer
        self.pool: PoolMember | None = None  # pool mode (execd.daemon.pool)

    # -- configuration --------------------------------------------------------------
    def _read_config(self) -> tuple[Config, Settings]:
        config = load_config(self.config_path)
        return config, load_settings(config)

    def start(self) -> None:
        """Everything that can fail at startup, before the event loop serves anything."""
        self.config, self.settings = self._read_config()
        configure_logging(self.settings, force_stderr=self.log_to_stderr)
        self.paths = Paths.from_settings(self.settings)
        self.paths.create()
        self.node = Node.build(self.config, self.settings)
        self.node.refresh_load(time.time())
        self.engine = PolicyEngine(policy_config(self.settings))
        self.backfill = BackfillClient(backfill_program(self.settings), self._backfill_exited)
        self.jobs = JobManager(self)
        self.node.on_broken = functools.partial(record_broken, self.jobs)
        self.jobs.setup_cgroups()
        self.cron = CronManager(
            cron_settings(self.settings),
            slot_ads=lambda: {str(ad["Name"]).split("@")[0]: ad for ad in self.resource_ads()},
            on_update=self._cron_updated,
        )
        self.benchmarks = BenchmarkRunner(self._benchmarks_done)
        self.fetch = FetchWorker(self)
        if runs_at_startup(self.settings.text("RUNBENCHMARKS")):
            self.benchmarks.request("startup")
        moment = now()
        for ad in self.node.ads():
            name = str(ad["Name"]).split("@")[0]
            self.execute(self.engine.add_slot(name, slot_facts(ad), moment))
        self.pool = pool_member(self)

    def reload(self) -> bool:
        """Parse and validate the new config in full; apply it only if it is good."""
        self.notifier.reloading()
        try:
            config, settings = self._read_config()
            slot_types = Node.build(config, settings, self.node.reader).slot_types
        except (ExecdError, OSError) as exc:
            logger.error("reconfig_rejected", error=str(exc), config=str(self.config_path))
            self.notifier.ready(f"reconfig rejected, old config kept: {exc}")
            return False
        changed = sorted(
            n for n in set(config.names()) | set(self.config.names())
            if config.get(n) != self.config.get(n)
        )
        if slot_types != self.node.slot_types:
            logger.warning("reconfig_needs_restart", reason="slot types changed",
                           detail="SLOT_TYPE_<N> changes take effect when execd restarts")
        try:
            new_policy = policy_config(settings)
            new_cron = cron_settings(settings)
            new_backfill = backfill_program(settings)
        except ExecdError as exc:
            logger.error("reconfig_rejected", error=str(exc), config=str(self.config_path))
            self.notifier.ready(f"reconfig rejected, old config kept: {exc}")
            return False
        self.config, self.settings = config, settings
        self.node.config, self.node.settings = config, settings
        self.backfill.program = new_backfill  # used from the client's next start
        self.execute(self.engine.reconfig(new_policy, now()))
        self.cron.reconfigure(new_cron)
        self.fetch.poke()  # keywords and hooks are read afresh on its next pass
        configure_logging(settings, force_stderr=self.log_to_stderr)
        self.reloads += 1
        logger.info("reconfig_applied", changed=changed[:50], count=len(changed))
        self.last_status = self.status_line()
        self.notifier.ready(self.last_status)
        self.wake.set()
        return True

    def resource_ads(self) -> list[Any]:
        """Slot ads from the node's resources plus what startd cron jobs publish."""
        ads = self.node.ads()
        benchmarks = getattr(self, "benchmarks", None)
        if benchmarks is not None:
            for ad in ads:
                ad.update(benchmarks.result.ad_attributes())
        cron = getattr(self, "cron", None)  # absent while the cron manager is being built
        if cron is None:
            return ads
        published = cron.slot_attributes()
        for ad in ads:
            for name, text in published.get(str(ad["Name"]).split("@")[0], {}).items():
                try:
                    expr = parse_expr(text)
                except ClassAdError:
                    continue  # the cron parser already logged the line
                value = expr.eval()
                # literals as values (so the policy engine sees them), the rest as expressions
                ad[name] = value if isinstance(value, bool | int | float | str) else expr
        return ads

    def _cron_updated(self, update: CronUpdate) -> None:
        # new cron values reach the policy at once, not at the next UPDATE_INTERVAL
        logger.debug("cron_update", job=update.job, slots=sorted(update.changed_slots))
        self.wake.set()

    def _benchmarks_done(self, _result: BenchmarkResult) -> None:
        moment = now()
        for name, slot in list(self.engine.slots.items()):
            if slot.activity.value == "Benchmarking":  # 4: back to Unclaimed/Idle
                self.execute(self.engine.benchmarks_done(name, moment))
        self.wake.set()

    def ads(self) -> list[Any]:
        """Slot ads with the policy engine's state, activity and timers merged in."""
        moment = now()
        ads = self.resource_ads()
        for ad in ads:
            name = str(ad["Name"]).split("@")[0]
            if name in self.engine.slots:
                ad.update(self.engine.attributes(name, moment))
            elif "SlotBrokenReason" in ad:  # a broken d-slot kept out of use
                ad.update(State="Owner", Activity="Idle", Start=False, Requirements=False)
        return ads

    def execute(self, actions: list[Any]) -> None:
        """Carry out the engine's actions (those that need no starter, for now)."""
        for action in actions:
            if isinstance(action, act.LogEvent):
                log_action(action)
                if action.event == "slot_state_changed":
                    if self.pool is not None:
                        self.pool.changed()  # advertise the new state now
                    # every event is followed by an evaluation (seed 000): a slot that
                    # just moved may move on (Owner -> Unclaimed -> d-slot deleted)
                    self.wake.set()
            elif isinstance(action, act.PublishAd):
                continue  # ads are built on demand from live state
            elif isinstance(action, act.StartBackfillClient):
                self.backfill.start()
            elif isinstance(action, act.KillBackfillClient):
                self.backfill.kill()
            elif isinstance(action, act.RunBenchmarks):
                self.benchmarks.request(f"RUNBENCHMARKS on {action.slot}")
            elif self.jobs.act(action):
                continue
            else:
                logger.warning("action_not_supported_yet", action=type(action).__name__,
                               slot=getattr(action, "slot", None))

    def _backfill_exited(self) -> None:
        self.execute(self.engine.backfill_client_exited(now()))
        self.wake.set()

    def job_cpu_usage(self) -> dict[str, int]:
        """Slot -> CPU microseconds its running job's cgroup used so far."""
        tree = self.jobs.tree
        return tree.cpu_usage_usec(list(self.jobs.running)) if tree is not None else {}

    def status_line(self) -> str:
        """systemd's STATUS=: "4 slots, 2 claimed, draining"."""
        states = [slot.state.value for slot in self.engine.slots.values()]
        return status_text(states, draining=self.engine.draining, stopping=self.stopping)

    def publish_status(self) -> None:
        line = self.status_line()
        if line != self.last_status:
            self.last_status = line
            self.notifier.status(line)

    def evaluate(self) -> None:
        moment = now()
        for ad in self.resource_ads():
            name = str(ad["Name"]).split("@")[0]
            if name in self.engine.slots:
                self.engine.set_facts(name, slot_facts(ad))
        self.execute(self.engine.evaluate(moment))
        if not self.engine.draining:
            self.jobs.forget_drain()  # a drain that resumed on completion is over

    # -- control socket verbs ---------------------------------------------------------
    def verbs(self) -> dict[str, Verb]:
        async def status(request: Request) -> Any:
            constraint = request.args.get("constraint")
            ads = self.ads()
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
                "started": self.started,
                "recovered": self.recovered,
                "uptime": time.time() - self.started,
                "reloads": self.reloads,
                "config": str(self.config_path),
                # for leak checks: open descriptors and live asyncio tasks
                "fds": len(os.listdir("/proc/self/fd")),
                "tasks": len(asyncio.all_tasks()),
            }

        async def reconfig(_request: Request) -> Any:
            if not self.reload():
                raise ControlError("refused", "the new configuration is invalid; see the log")
            return {"reloaded": True}

        async def off(request: Request) -> Any:
            how = request.args.get("how", "graceful")
            if how not in ("graceful", "peaceful", "fast"):
                raise ControlError("bad_args", f"unknown shutdown {how!r}")
            self.begin_shutdown(how)
            return {"shutting_down": how}

        async def request_claim(request: Request) -> Any:
            job = request.args.get("job", {})
            slot = request.args.get("slot")
            if not isinstance(job, dict) or not (slot is None or isinstance(slot, str)):
                raise ControlError("bad_args", "'job' must be an object and 'slot' a string")
            return self.jobs.request_claim(slot, job)

        async def activate(request: Request) -> Any:
            job = request.args.get("job", {})
            if not isinstance(job, dict):
                raise ControlError("bad_args", "'job' must be an object")
            job.setdefault("Owner", request.peer.user)
            if request.peer.uid != 0 and job["Owner"] != request.peer.user:
                raise ControlError("permission_denied", "a job may only run as its submitter")
            return self.jobs.activate(request.args.get("claim_id"), job)

        async def release(request: Request) -> Any:
            return self.jobs.release(request.args.get("claim_id"))

        async def vacate_claim(request: Request) -> Any:
            return self.jobs.signal_job(request.args.get("claim_id"), "vacate")

        async def alive(request: Request) -> Any:
            return self.jobs.signal_job(request.args.get("claim_id"), "alive")

        async def job_result(request: Request) -> Any:
            return await self.jobs.result(request.args.get("job_id"),
                                          bool(request.args.get("wait", False)),
                                          bool(request.args.get("ack", False)))

        def claim_verb(verb: str) -> Any:
            async def handler(request: Request) -> Any:
                return self.jobs.signal_job(request.args.get("claim_id"), verb)
            return handler

        async def match(request: Request) -> Any:
            return self.jobs.matches.match(request.args.get("slot"))

        async def restart(_request: Request) -> Any:
            self.begin_shutdown("restart")
            return {"restarting": True, "pid": os.getpid()}

        async def who(_request: Request) -> Any:
            return {"jobs": running_jobs(self.jobs)}

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
                actions = self.engine.drain(how, now(), reason=reason, check=check,
                                            start=start, resume_on_completion=bool(resume))
            except ExecdError as exc:
                raise ControlError("refused", str(exc)) from None
            self.execute(actions)
            self.jobs.record_drain(how, reason, bool(resume))
            return {"draining": how, "reason": reason}

        async def cancel_drain(_request: Request) -> Any:
            try:
                self.execute(self.engine.cancel_drain(now()))
            except ExecdError as exc:
                raise ControlError("refused", str(exc)) from None
            self.jobs.forget_drain()
            return {"draining": False}

        async def vacate(request: Request) -> Any:
            fast = bool(request.args.get("fast", False))
            slot = request.args.get("slot")
            names = [slot] if isinstance(slot, str) else [
                n for n, s in self.engine.slots.items() if s.state.value == "Claimed"]
            vacated = []
            for name in names:
                if name not in self.engine.slots:
                    raise ControlError("bad_args", f"no slot named {name!r}")
                try:
                    self.execute(self.engine.vacate(name, now(), fast=fast))
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

    # -- lifecycle -----------------------------------------------------------------------
    def begin_shutdown(self, how: str) -> None:
        if self.stopping == "fast":
            return
        if self.stopping is not None and how != "fast":
            return
        self.stopping = how
        logger.info("shutdown_requested", how=how)
        if how == "restart":
            self.notifier.reloading()  # same pid, new image: READY=1 comes from it
        else:
            self.notifier.stopping(f"shutting down ({how})")
        self.last_status = f"shutting down ({how})"
        if how != "restart":
            mode = "fast" if how == "fast" else how
            self.execute(self.engine.shutdown(mode, now()))
        self.wake.set()

    async def _signal_loop(self) -> None:
        while True:
            request = await self.signals.next()
            if request is SignalRequest.REOPEN_LOGS:
                log.reopen()  # first, so that the event lands in the new file
            logger.info("signal_received", request=request.value)
            if request is SignalRequest.RECONFIG:
                self.reload()
            elif request is SignalRequest.SHUTDOWN_GRACEFUL:
                self.begin_shutdown("graceful")
            elif request is SignalRequest.SHUTDOWN_FAST:
                self.begin_shutdown("fast")
            elif request is SignalRequest.RESTART_IN_PLACE:
                self.begin_shutdown("restart")

    async def _watchdog_loop(self, interval: float) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def _update_loop(self) -> None:
        """Evaluate policy every UPDATE_INTERVAL, or POLLING_INTERVAL while claimed.

        After a shutdown request it goes on until no job is left (the engine retires,
        vacates or kills them as the shutdown mode says), unless restarting in place."""
        sample_due = 0.0
        while self.stopping is None or (self.jobs.running and self.stopping != "restart"):
            if time.monotonic() >= sample_due:  # load and idle times: sampled once a poll,
                self.node.refresh_load(time.time(), self.job_cpu_usage())  # not on every event
                sample_due = time.monotonic() + self.engine.config.number("POLLING_INTERVAL")
            try:
                self.evaluate()
            except Exception as exc:  # a policy bug is logged, never fatal to the daemon
                logger.exception("policy_pass_failed", error=str(exc))
            self.publish_status()
            mono = time.monotonic()
            due = min(self.engine.next_evaluation_due(mono), self.jobs.matches.next_timeout())
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), timeout=max(0.0, due - mono))

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        self.signals.install(loop)
        self.recovered = recover(self.jobs)  # before any command can change the state
        admin = self.settings.get_str("EXECD_ADMIN_GROUP")
        schedulers = frozenset(self.settings.get_list("EXECD_SCHEDULER_USERS"))
        self.control = ControlServer(self.paths.socket, self.verbs(), Authorizer(admin, schedulers))
        await self.control.start()
        self.backfill.attach()
        logger.info("execd_started", config=str(self.config_path), socket=str(self.paths.socket),
                    slots=[r.name for r in self.node.slots.resources()])
        self.last_status = self.status_line()
        self.notifier.ready(self.last_status)  # slots are published: `status` answers
        try:
            async with asyncio.TaskGroup() as tasks:
                background = [tasks.create_task(self._signal_loop()),
                              tasks.create_task(self.cron.run()),
                              tasks.create_task(self.benchmarks.run()),
                              tasks.create_task(self.fetch.run())]
                interval = self.notifier.watchdog_interval()
                if interval:
                    background.append(tasks.create_task(self._watchdog_loop(interval)))
                if self.pool is not None:
                    background.append(tasks.create_task(self.pool.run()))
                await tasks.create_task(self._update_loop())
                for task in background:
                    task.cancel()
        finally:
            self.backfill.close()
            await self.control.close()
            self.signals.uninstall(loop)
        logger.info("execd_stopped", how=self.stopping)
        self.jobs.store.close()
        if self.stopping == "restart":
            try:
                reexec()  # does not return: the same pid runs execd again and re-adopts
            except OSError as exc:  # jobs run on; a supervisor's restart re-adopts them
                logger.error("restart_failed", error=str(exc))
                return 1
        return 0


def run_daemon(config_path: Path, *, log_to_stderr: bool = False) -> int:
    daemon = Daemon(config_path, log_to_stderr=log_to_stderr)
    try:
        daemon.start()
    except ConfigError as exc:
        print(f"execd: cannot start: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(daemon.serve())
