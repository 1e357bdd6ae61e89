"""The daemon-core commands HTCondor's tools send a startd itself, for `execd run`.

- DC_RECONFIG / DC_RECONFIG_FULL (`condor_reconfig -startd`, `-addr`): the reload
  SIGHUP does (parse, validate, apply; a bad file keeps the old config and is logged).
- DC_OFF_GRACEFUL / DC_OFF_FAST / DC_OFF_PEACEFUL (`condor_restart -startd` sends the
  graceful one; a condor_master would start the daemon again, systemd restarts execd
  only after a failure): the shutdowns SIGTERM, SIGQUIT and `execd off --peaceful` do.
- CONFIG_VAL (`condor_config_val -startd -name NAME`, `-addr`): a name's expanded value
  or "Not defined"; DC_CONFIG_VAL (the same with `-verbose`): a name's expanded
  value, then `NAME = raw`, where it is defined (`file, line N`, or `<Default>`), its
  default and a use count, as daemon-core answers; `?names[:regex]` lists the names the
  configuration defines.

Reconfig and shutdown are ADMINISTRATOR commands, CONFIG_VAL and DC_CONFIG_VAL READ
ones, as daemon-core registers them (ALLOW_<LEVEL>/DENY_<LEVEL>, judged by
PoolCommands.authorize). A command with bad input is answered (or dropped) and logged;
the daemon goes on.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from execd import log
from execd.wire.channel import Channel
from execd.wire.commands import Command
from execd.wire.server import Handler, Peer

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("pool")

SHUTDOWNS = {Command.DC_OFF_GRACEFUL: "graceful", Command.DC_OFF_FAST: "fast",
             Command.DC_OFF_PEACEFUL: "peaceful"}  # fmt: skip
DEFAULT_LOCATION = "<Default>"


class DaemonCommands:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def handlers(self) -> dict[int, Handler]:
        off = self.shut_down
        return {Command.DC_RECONFIG: self.reconfig, Command.DC_RECONFIG_FULL: self.reconfig,
                Command.DC_OFF_GRACEFUL: off, Command.DC_OFF_FAST: off,
                Command.DC_OFF_PEACEFUL: off, Command.DC_CONFIG_VAL: self.config_val,
                Command.CONFIG_VAL: self.config_val}

    async def reconfig(self, channel: Channel, command: int, peer: Peer) -> None:
        logger.info("pool_reconfig", user=peer.user)
        self.daemon.reload()  # logs reconfig_applied, or reconfig_rejected and why

    async def shut_down(self, channel: Channel, command: int, peer: Peer) -> None:
        how = SHUTDOWNS[Command(command)]
        logger.info("pool_shutdown", user=peer.user, how=how)
        self.daemon.begin_shutdown(how)

    async def config_val(self, channel: Channel, command: int, peer: Peer) -> None:
        dec = channel.decoder(await channel.recv())
        name = dec.get_string("parameter name")
        dec.finish("DC_CONFIG_VAL request")
        enc = channel.encoder()
        config = self.daemon.config
        if command == Command.CONFIG_VAL:  # the old form: the value, or "Not defined"
            await channel.send(enc.put_string(config.get(name) or "Not defined").payload())
            return
        if name.startswith("?"):
            for line in self._query(name):
                enc.put_string(line)
            await channel.send(enc.payload())
            return
        value = config.get(name)
        if value is None:
            enc.put_null_string()  # not defined, and no default
        else:
            found = config.definition(name)
            default = config.default(name)
            enc.put_string(value)
            enc.put_string(f"{(found.name if found else name).upper()} = "
                           f"{found.raw if found else default or ''}")  # fmt: skip
            enc.put_string(str(found.origin) if found else DEFAULT_LOCATION)
            if default is None:  # condor_config_val prints no default line
                enc.put_null_string()
            else:
                enc.put_string(default)
            enc.put_string("1")  # HTCondor's use count: execd does not count uses
        await channel.send(enc.payload())

    def _query(self, query: str) -> list[str]:
        """`?names[:regex]`: the defined names (case-blind match); else the error string
        daemon-core answers an unsupported query with."""
        head, _, pattern = query.partition(":")
        if head.lower() != "?names":
            return [f"!error:unsup:1: '{query}' is not supported"]
        try:
            wanted = re.compile(pattern or ".*", re.IGNORECASE)
        except re.error as exc:
            return [f"!error:regex:{exc.pos or 0}: {exc.msg}"]
        names = [n for n in self.daemon.config.names() if wanted.search(n)]
        return names or [""]
