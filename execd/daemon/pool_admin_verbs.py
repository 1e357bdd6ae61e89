"""condor_vacate and condor_drain from the pool's administrators: VACATE_CLAIM(_FAST),
VACATE_ALL_CLAIMS / VACATE_ALL_FAST, DRAIN_JOBS and CANCEL_DRAIN_JOBS, each carried out
by the control socket's own `vacate`, `drain` and `cancel_drain` verbs (as an
administrator). Who may send them is PoolCommands.authorize's decision."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from execd import log
from execd.daemon.control import ControlError, Role
from execd.daemon.control import Peer as LocalPeer
from execd.daemon.control import Request as LocalRequest
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad, from_values, to_classad
from execd.wire.commands import Command
from execd.wire.server import Handler, Peer

if TYPE_CHECKING:
    from execd.daemon.runtime import Daemon

logger = log.get_logger("pool")

HOW_FAST = {0: "graceful", 10: "quick", 20: "fast"}
DRAIN_RESUME_ON_COMPLETION = 1
POOL_ADMIN = LocalPeer(pid=0, uid=-1, gid=-1, roles=frozenset({Role.READ, Role.ADMIN}))


class AdminVerbs:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def handlers(self) -> dict[int, Handler]:
        return {
            Command.VACATE_CLAIM: self.vacate_claim,
            Command.VACATE_CLAIM_FAST: self.vacate_claim,
            Command.VACATE_ALL_CLAIMS: self.vacate_all,
            Command.VACATE_ALL_FAST: self.vacate_all,
            Command.DRAIN_JOBS: self.drain,
            Command.CANCEL_DRAIN_JOBS: self.cancel_drain,
        }

    async def _verb(self, name: str, args: dict[str, Any]) -> Any:
        verb = self.daemon.verbs()[name]
        return await verb.handler(LocalRequest(id=None, verb=name, args=args, peer=POOL_ADMIN))

    async def vacate_claim(self, channel: Channel, command: int, peer: Peer) -> None:
        dec = channel.decoder(await channel.recv())
        name = dec.get_string("slot name")
        dec.finish("VACATE_CLAIM")
        fast = command == Command.VACATE_CLAIM_FAST
        try:
            result = await self._verb("vacate", {"slot": name.split("@")[0], "fast": fast})
        except ControlError as exc:
            logger.warning("pool_vacate_refused", user=peer.user, slot=name, why=exc.message)
            return
        logger.info("pool_vacated", user=peer.user, slots=result["vacated"], fast=fast)

    async def vacate_all(self, channel: Channel, command: int, peer: Peer) -> None:
        fast = command == Command.VACATE_ALL_FAST
        result = await self._verb("vacate", {"fast": fast})
        logger.info("pool_vacated", user=peer.user, slots=result["vacated"], fast=fast)

    async def drain(self, channel: Channel, command: int, peer: Peer) -> None:
        request = to_classad(decode_ad(channel.decoder(await channel.recv()), "DRAIN_JOBS ad"))
        how = HOW_FAST.get(request.get("HowFast", 0)) if isinstance(
            request.get("HowFast", 0), int) else None
        args: dict[str, Any] = {
            "how": how, "reason": str(request.get("DrainReason", f"by {peer.user}")),
            "resume_on_completion":
                request.get("ResumeOnCompletion") == DRAIN_RESUME_ON_COMPLETION,
        }  # fmt: skip
        if "CheckExpr" in request:
            args["check"] = str(request.lookup("CheckExpr"))
        reply: dict[str, Any]
        try:
            if how is None:
                raise ControlError("bad_args", f"HowFast {request.get('HowFast')!r} is not "
                                   "0 (graceful), 10 (quick) or 20 (fast)")
            await self._verb("drain", args)
            reply = {"Result": True, "RequestID": "1"}
            logger.info("pool_drain", user=peer.user, how=how, reason=args["reason"])
        except ControlError as exc:
            logger.warning("pool_drain_refused", user=peer.user, why=exc.message)
            reply = {"Result": False, "ErrorString": exc.message, "ErrorCode": 1}
        await self._reply(channel, reply)

    async def cancel_drain(self, channel: Channel, command: int, peer: Peer) -> None:
        decode_ad(channel.decoder(await channel.recv()), "CANCEL_DRAIN_JOBS ad")
        reply: dict[str, Any]
        try:
            await self._verb("cancel_drain", {})
            reply = {"Result": True}
            logger.info("pool_drain_cancelled", user=peer.user)
        except ControlError as exc:
            logger.warning("pool_cancel_drain_refused", user=peer.user, why=exc.message)
            reply = {"Result": False, "ErrorString": exc.message, "ErrorCode": 1}
        await self._reply(channel, reply)

    @staticmethod
    async def _reply(channel: Channel, values: dict[str, Any]) -> None:
        ad: WireAd = from_values(values)
        await channel.send(encode_ad(channel.encoder(), ad).payload())

