"""`execd run`: the long-running daemon.

One asyncio process. Its main coroutine owns every task (a TaskGroup): the signal
consumer, the update timer, the watchdog pinger and the control socket's clients.
Signal handlers only enqueue (execd.daemon.signals); reload is parse, validate, diff,
apply, and a config that fails validation changes nothing. What each control-socket
verb does is in execd.daemon.verbs.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from execd import log
from execd.aio import cancel_until_done, wait_event
from execd.config.loader import Config, load_config
from execd.config.log_setup import configure_logging
from execd.config.settings import Settings, load_settings
from execd.daemon import slot_ads
from execd.daemon.backfill import BackfillClient, backfill_program
from execd.daemon.broken import record_broken
from execd.daemon.control import Authorizer, ControlServer, Verb
from execd.daemon.fetch_work import FetchWorker
from execd.daemon.footprint import limit_malloc_arenas, small_default_executor
from execd.daemon.job_launch import CONCLUDE_TIMEOUT_S
from execd.daemon.jobs import JobManager
from execd.daemon.node import Node, Paths, condor_uid
from execd.daemon.policy_glue import log_action, now, policy_config, slot_facts
from execd.daemon.pool import PoolMember, pool_member
from execd.daemon.recovery import recover
from execd.daemon.restart import reexec
from execd.daemon.sdnotify import Notifier, status_text
from execd.daemon.signals import Request as SignalRequest
from execd.daemon.signals import SignalQueue
from execd.daemon.startd_history import StartdHistory
from execd.daemon.startd_stats import StartdStats
from execd.daemon.verbs import control_verbs
from execd.errors import ConfigError, ExecdError
from execd.hooks.benchmarks import BenchmarkResult, BenchmarkRunner, runs_at_startup
from execd.hooks.cron import CronManager, CronUpdate
from execd.hooks.cron_config import cron_settings
from execd.policy import actions as act
from execd.policy.engine import PolicyEngine
from execd.starter.launcher import ZYGOTE
from execd.wire.authz_policy import policy_from_settings

logger = log.get_logger("daemon")

# Knobs read when execd starts, that condor_startd applies at reconfig: a reload that
# changes one says so.
READ_AT_START: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda name: name.startswith("OFFLINE_MACHINE_RESOURCE_"),
     "offline resource ids change when execd restarts"),
    (lambda name: name in ("NETWORK_HOSTNAME", "DEFAULT_DOMAIN_NAME"),
     "the node's name (Machine, slot Names) changes when execd restarts"),
)


class Daemon:
    def __init__(self, config_path: Path, *, log_to_stderr: bool = False) -> None:
        self.config_path = config_path
        self.log_to_stderr = log_to_stderr
        self.notifier = Notifier()
        self.signals = SignalQueue()
        self.wake = asyncio.Event()
        self.stopping: str | None = None
        self.started = time.time()
        self.reconfigured = self.started  # DaemonLastReconfigTime
        self.startd_stats = StartdStats()  # JobStarts & co. (pool ads)
        self.startd_history = StartdHistory(lambda: self.settings)  # ended jobs' ads
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
        if (problem := self.paths.execute_problem(condor_uid(self.settings))) is not None:
            logger.error("execute_dir_permissions", path=str(self.paths.execute), why=problem)
        self.node = Node.build(self.config, self.settings)
        self.node.refresh_load(time.time())
        self.engine = PolicyEngine(policy_config(self.settings))
        self.fetch = FetchWorker(self)  # before anything builds an ad (its fetch times)
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
        for matches, detail in READ_AT_START:
            if named := [n for n in changed if matches(n.upper())]:
                logger.warning("reconfig_needs_restart", reason=f"{', '.join(named)} changed",
                               detail=detail)
        try:
            new_policy = policy_config(settings)
            new_cron = cron_settings(settings)
            new_backfill = backfill_program(settings)
            new_authz = policy_from_settings(settings) if self.pool else None  # at once
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
        self.reconfigured = time.time()
        logger.info("reconfig_applied", changed=changed[:50], count=len(changed))
        self.last_status = self.status_line()
        self.notifier.ready(self.last_status)
        self.wake.set()
        if self.pool is not None:  # as condor_startd: the pool sees the new config at once
            if new_authz is not None:
                self.pool.lookups.use_authz(new_authz)
            self.pool.lookups.ask_plugins_again()
            self.pool.changed()
        return True

    def resource_ads(self) -> list[Any]:
        return slot_ads.resource_ads(self)

    def slot_ad(self, name: str, resource_ad: Any) -> Any:
        return slot_ads.one_slot_ad(self, name, resource_ad)

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
        return slot_ads.slot_ads(self)

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
        return control_verbs(self)

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
        vacates or kills them as the shutdown mode says, and the shadows are told how
        they ended), unless restarting in place."""
        sample_due = 0.0
        while self.stopping is None or (self.stopping != "restart" and self.jobs.left()):
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
            if self.stopping is not None and self.jobs.last_ended is not None:
                due = min(due, self.jobs.last_ended + CONCLUDE_TIMEOUT_S)  # shadows' bound
            self.wake.clear()
            await wait_event(self.wake, due - mono)  # not wait_for: it can lose a cancel

    async def serve(self) -> int:
        loop = asyncio.get_running_loop()
        small_default_executor(loop)
        self.signals.install(loop)
        self.recovered = recover(self.jobs)  # before any command can change the state
        ZYGOTE.start()  # the starters' parent, up before the first job as a startd is
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
                pool = tasks.create_task(self.pool.run()) if self.pool is not None else None
                await tasks.create_task(self._update_loop())
                await cancel_until_done(background)
                if pool is not None:
                    # One cancel: pool.run() then invalidates the ads (bounded by its own
                    # STOP_TIMEOUT_S); cancelling again would cut that short.
                    pool.cancel()
                    await asyncio.wait([pool])
        finally:
            self.backfill.close()
            await self.control.close()
            self.signals.uninstall(loop)
        logger.info("execd_stopped", how=self.stopping)
        self.jobs.store.close()
        if self.stopping == "restart":
            # The exec would close the zygote's pipes and it would exit unreaped: a
            # zombie the new image has no handle on. Its starters carry on either way.
            ZYGOTE.close()
            try:
                reexec()  # does not return: the same pid runs execd again and re-adopts
            except OSError as exc:  # jobs run on; a supervisor's restart re-adopts them
                logger.error("restart_failed", error=str(exc))
                return 1
        return 0


def run_daemon(config_path: Path, *, log_to_stderr: bool = False) -> int:
    limit_malloc_arenas()  # before any thread starts
    daemon = Daemon(config_path, log_to_stderr=log_to_stderr)
    try:
        daemon.start()
    except ConfigError as exc:
        print(f"execd: cannot start: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(daemon.serve())
