"""What the pool member looks up off the event loop, as it joins the pool and again at
each reload, the answer in force serving until the new one is in:

- the host names an ALLOW_/DENY_ policy names, resolved (so a DENY by name never lapses
  while a reload's policy resolves);
- what the node's file transfer plugins do: FILETRANSFER_PLUGINS asked with `-classad`,
  as condor_startd runs `condor_starter -classad` at its start and at each reconfig.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING

from execd import log
from execd.wire.blocking_worker import BlockingWorker
from execd.wire.transfer_plugins import PluginTable, node_plugins

if TYPE_CHECKING:
    from execd.daemon.pool import PoolMember
    from execd.wire.authz_policy import AuthzPolicy

logger = log.get_logger("pool")
RESOLVE_TIMEOUT_S = 60.0  # resolving an ALLOW_/DENY_ policy's host names, all of them


class PoolLookups:
    """The authorization policy's host names and the transfer plugins, looked up."""

    def __init__(self, member: PoolMember) -> None:
        self.member = member
        # None: URL transfers are off (ENABLE_URL_TRANSFERS)
        self.plugins: PluginTable | None = None
        self._resolver = BlockingWorker("execd-authz-hosts")
        self._authz_task: asyncio.Task[None] | None = None  # a reload's policy resolving
        self._plugins_task: asyncio.Task[None] | None = None  # a reload's plugins asked

    def tasks(self) -> list[asyncio.Task[None]]:
        """The lookups under way (the member cancels them as it leaves)."""
        return [t for t in (self._authz_task, self._plugins_task) if t is not None]

    def use_authz(self, policy: AuthzPolicy) -> None:
        """A reload's ALLOW_/DENY_ policy: at once when it names no host to resolve;
        else once its host names are resolved off the loop, the policy in force
        staying until then."""
        if self._authz_task is not None:
            self._authz_task.cancel()
            self._authz_task = None
        if not policy.host_names():
            self.member.config = dataclasses.replace(self.member.config, authz=policy)
            return
        self._authz_task = asyncio.get_running_loop().create_task(self.resolve_authz(policy))

    async def resolve_authz(self, policy: AuthzPolicy, *, at_start: bool = False) -> None:
        hosts = sorted(policy.host_names())
        try:
            resolved = await self._resolver.run(RESOLVE_TIMEOUT_S, policy.resolved)
        except TimeoutError:
            logger.warning("authz_hosts_unresolved", hosts=hosts, timeout_s=RESOLVE_TIMEOUT_S,
                           policy="unresolved names match nothing" if at_start
                           else "the policy in force stays")  # fmt: skip
            if not at_start:
                return
            resolved = policy
        self.member.config = dataclasses.replace(self.member.config, authz=resolved)
        logger.info("authz_policy_applied", hosts=hosts)

    async def ask_plugins(self) -> None:
        """FILETRANSFER_PLUGINS asked what they do, off the loop."""
        settings = self.member.daemon.settings
        if not settings.get_bool("ENABLE_URL_TRANSFERS", True):
            self.plugins = None
            return
        self.plugins = await asyncio.to_thread(
            node_plugins, settings.get_list("FILETRANSFER_PLUGINS"),
            float(settings.get_int("FILETRANSFER_PLUGIN_CLASSAD_TIMEOUT") or 20))

    def ask_plugins_again(self) -> None:
        """A reload: the plugins asked afresh; the table in force serves until then."""
        if self._plugins_task is not None:
            self._plugins_task.cancel()

        async def ask() -> None:
            await self.ask_plugins()
            self.member.changed()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no pool running (a reload before it joined): asked at join
            return
        self._plugins_task = loop.create_task(ask())
