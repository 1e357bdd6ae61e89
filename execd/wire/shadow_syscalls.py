"""The starter's side of the shadow's remote system calls (the activation socket).

After ACTIVATE_CLAIM the connection the shadow opened to the startd becomes the
starter's syscall channel: the starter sends one message per call (int call number, its
arguments), the shadow answers one message (int rval; errno if rval < 0; results).
Numbers and shapes are HTCondor's (condor_includes/condor_sys.h,
condor_shadow.V6.1/NTreceivers.cpp), pinned against job1.pcap in
tests/unit/wire/test_shadow_syscalls.py:

| call | number | arguments -> results |
|---|---|---|
| get_job_info | -63 | -> job ad |
| register_starter_info | -77 | starter ad -> |
| get_sec_session_info | 288 | reconnect info, filetrans info -> 2 x (session id, info, key) |
| register_job_info | -81 | update ad -> |
| begin_execution | -78 | -> |
| event_notification | 304 | event ad -> rval only (never an errno) |
| job_exit | -65 | wait status, reason, exit ad -> |
| ulog | 284 | event ad (a critical RemoteErrorEvent puts the job on hold); no answer |
| get_job_attr | 285 | name -> the attribute's expression (text; `UNDEFINED` if none) |
| set_job_attr | 286 | expression, name -> (the expression comes first) |

With a `link` (execd/wire/shadow_link.py) a call whose connection is lost waits for
the reconnect and is made again on the new connection, after get_sec_session_info (the
new shadow's file transfer session), as HTCondor's starter does. Chirp's file calls
(open, read, getfile, putfile, ...): ShadowFileCalls (execd/wire/shadow_file_calls.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from execd.errors import RemoteProtocolError
from execd.wire.call_turns import CallTurns
from execd.wire.cedar_errno import wire_errno
from execd.wire.channel import Channel
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.encoding import Decoder, Encoder

if TYPE_CHECKING:
    from execd.wire.shadow_link import ShadowLink

GET_JOB_INFO = -63
JOB_EXIT = -65
REGISTER_STARTER_INFO = -77
BEGIN_EXECUTION = -78
REGISTER_JOB_INFO = -81
ULOG = 284
GET_JOB_ATTR = 285
SET_JOB_ATTR = 286
GET_SEC_SESSION_INFO = 288
EVENT_NOTIFICATION = 304

# Reasons for job_exit (condor_includes/exit.h).
JOB_EXITED = 100
JOB_COREDUMPED = 103
JOB_SHOULD_REQUEUE = 107  # killed on request (vacate, remove): os_proc.cpp JobExit
JOB_SHOULD_HOLD = 112

T = TypeVar("T")


class MessageChannel(Protocol):
    """What the syscall and file transfer code needs of a connection (Channel has it)."""

    async def send(self, payload: bytes, *, timeout_s: float | None = None) -> None: ...
    async def recv(self, timeout_s: float | None = None) -> bytes: ...
    def encoder(self) -> Encoder: ...
    def decoder(self, payload: bytes) -> Decoder: ...


class SyscallError(RemoteProtocolError):
    """The shadow answered a call with a failure (rval < 0 and its errno)."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno


class ShadowConnectionLostError(RemoteProtocolError):
    """Sending a call or reading its answer failed: the shadow is gone (for now)."""


class StaleDescriptorError(ShadowConnectionLostError):
    """A call on a shadow descriptor opened on a connection a reconnect replaced: not
    sent (the new shadow's descriptor of that number is another file, or none)."""


@dataclass(frozen=True)
class SecSessionInfo:
    """The sessions the shadow made for this starter (keys stay out of repr)."""

    reconnect_id: str
    reconnect_info: str
    reconnect_key: str = field(repr=False)
    filetrans_id: str
    filetrans_info: str
    filetrans_key: str = field(repr=False)


class ShadowSyscalls:
    """Calls on the activation socket, one at a time, each waiting for its answer."""

    def __init__(self, channel: MessageChannel, *, timeout_s: float = 300.0,
                 link: ShadowLink | None = None) -> None:  # fmt: skip
        self.channel = channel
        self.timeout_s = timeout_s
        self.link = link
        self.sessions: SecSessionInfo | None = None  # the latest get_sec_session_info
        self.turns = CallTurns()  # one call at a time; a restart's quiesce stops new ones
        # True while a call is under way, and after one that did not complete (failed, or
        # cancelled: until its answer is read): the connection may hold half a message.
        self.in_call = False
        # A call cancelled before its answer came: its exchange goes on, reading the
        # answer for nothing; the next call on that connection waits for it.
        self._unfinished: tuple[MessageChannel, asyncio.Future[bytes | None]] | None = None
        self._given_up: MessageChannel | None = None  # such an exchange failed on it
        self._handed_over = False  # the connection is the next image's (retire)
        self._owned: set[asyncio.Task[Any]] = set()  # shielded calls nobody may await
        # What each register_job_info carries besides its ad (Chirp's delayed updates).
        self.update_extra: Callable[[], WireAd] | None = None

    def attach(self, link: ShadowLink) -> None:
        """Calls from now on survive a lost connection by waiting for `link`'s reconnect."""
        self.link = link
        link.adopt = self.adopt_reconnect
        link.quiesce = self.quiesce

    @property
    def idle(self) -> bool:
        """No call under way, holding the lock or cut off: between messages."""
        return not self.in_call and not self.turns.lock.locked()

    def retire(self) -> None:
        """The connection is the next image's: a call still queued fails as if lost."""
        self._handed_over = True

    async def quiesce(self, timeout_s: float) -> bool:
        """CallTurns.quiesce until idle, or the connection lost (given up; a call
        waiting for a reconnect): nothing to wait for, the shadow reconnects anyway."""
        link = self.link
        return await self.turns.quiesce(
            lambda: self.idle or self._given_up is self.channel
            or (link is not None and link.disconnected.is_set()), timeout_s)

    async def adopt_reconnect(self) -> None:
        """Move to the connection a reconnect offered, if any, and get its sessions."""
        async with self.turns.turn():
            if self.link is None or not self.link.offered:
                return
            # get_sec_session_info's answer is awaited on the new connection: not idle
            # (a call cut off on the old one no longer matters once it is taken)
            self.in_call = True
            with contextlib.suppress(ShadowConnectionLostError):  # the next call waits again
                await self._take_offered()
                self.in_call = False

    async def _take_offered(self) -> None:
        if self.link is not None and (fresh := self.link.take_offered()):
            self.channel = fresh
            self.sessions = await self._sessions_once("", "")

    async def _once(self, build: Callable[[Encoder], Encoder], answer: bool) -> Decoder | None:
        """One message and its answer on the current connection (under the lock). The
        exchange is a task of its own: a call cancelled meanwhile (the job held, the
        conversation ending) does not stop it, so its answer is read, and dropped, before
        the next call sends (which would read it as its own). A message is written whole
        (Channel.send): no cancel leaves half of one. Only where the exchange fails (no
        answer within timeout_s) is the connection given up: closed, the link told."""
        if self._handed_over:
            raise ShadowConnectionLostError("the connection was handed to the next image")
        channel = self.channel
        await self._after_unfinished(channel)
        message = build(channel.encoder()).payload()
        exchange = self.owned(self._send_and_read(channel, message, answer))
        try:
            payload = await asyncio.shield(exchange)
        except asyncio.CancelledError:
            if not exchange.done():
                self._unfinished = (channel, exchange)
                exchange.add_done_callback(lambda done: self._unfinished_ended(channel, done))
            raise
        except ShadowConnectionLostError:
            # No answer in time, or the send failed: a late answer would be read as the next
            # call's; the shadow reconnects once it is closed (syscall_sock_disconnect's).
            self.give_up(channel)
            raise
        if self.link is not None:
            self.link.rpc_done()
        return None if payload is None else channel.decoder(payload)

    async def _send_and_read(self, channel: MessageChannel, message: bytes,
                             answer: bool) -> bytes | None:  # fmt: skip
        try:
            await channel.send(message, timeout_s=self.timeout_s)
            return await channel.recv(self.timeout_s) if answer else None
        except RemoteProtocolError as exc:
            raise ShadowConnectionLostError(str(exc)) from None

    async def _after_unfinished(self, channel: MessageChannel) -> None:
        """Waits for a cancelled call's exchange on `channel` to end (its answer read);
        ShadowConnectionLostError where it failed and the connection was given up."""
        if self._unfinished is not None and self._unfinished[0] is channel:
            await asyncio.wait({self._unfinished[1]})  # a cancel here leaves it be
            self._unfinished = None
        if self._given_up is channel:
            raise ShadowConnectionLostError("the connection was given up (no answer came)")

    def _unfinished_ended(self, channel: MessageChannel,
                          exchange: asyncio.Future[bytes | None]) -> None:  # fmt: skip
        if not exchange.cancelled() and exchange.exception() is None:
            if self.link is not None:
                self.link.rpc_done()
            if channel is self.channel and self._given_up is not channel \
                    and not self.turns.lock.locked():  # fmt: skip
                self.in_call = False  # answered, and no call since: between messages
                self.turns.changed()
            return
        # Its answer may still come, where the next call would read it: given up.
        self.give_up(channel)
        if self.link is not None and channel is self.channel and not self._handed_over:
            self.link.lost(ShadowConnectionLostError("a cancelled call's answer did not come"))

    def give_up(self, channel: MessageChannel) -> None:
        """Nothing more is sent or read on `channel`: closed (the shadow sees it gone and
        reconnects), and a call that comes to it fails as on a lost connection."""
        if isinstance(channel, Channel):
            channel.writer.close()
        self._given_up = channel
        self.turns.changed()

    def owned(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """`work` as a task held until it ends, its failure retrieved: a call shielded from
        its caller's cancel (a stream's write, a call's exchange) may have nobody else."""
        task = asyncio.ensure_future(work)
        self._owned.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._owned.discard(task)
        if not task.cancelled():
            task.exception()

    async def _exchange(self, build: Callable[[Encoder], Encoder], *, answer: bool = True,
                        replay: bool = True, connection: int | None = None,
                        ) -> Decoder | None:  # fmt: skip
        """One call; after a lost connection it is sent again on the reconnect's, unless
        `replay` is False (it may have run on the shadow), which fails at once as
        condor_starter's REMOTE_CONDOR_* do on a dead socket (the next call waits)."""
        async with self.turns.turn():
            while True:
                try:
                    self.in_call = True
                    await self._take_offered()
                    if connection is not None and self.link is not None and \
                            self.link.connections != connection:
                        self.in_call = False
                        raise StaleDescriptorError(
                            f"a descriptor of connection {connection}, now "
                            f"{self.link.connections}")  # fmt: skip
                    answered = await self._once(build, answer)
                    self.in_call = False
                    return answered
                except StaleDescriptorError:
                    raise
                except ShadowConnectionLostError as exc:
                    if self.link is None or self._handed_over:
                        raise  # handed over: not lost, the next image goes on with it
                    if not replay:
                        self.link.lost(exc)
                        raise
                    await self.link.wait_for_reconnect(exc)

    async def _call(self, build: Callable[[Encoder], Encoder], name: str) -> Decoder:
        dec = await self._exchange(build)
        assert dec is not None
        return _checked(dec, name)

    def _start(self, number: int) -> Callable[[Encoder], Encoder]:
        return lambda enc: enc.put_int(number)

    def _with_ad(self, number: int, ad: Mapping[str, str]) -> Callable[[Encoder], Encoder]:
        return lambda enc: encode_ad(enc.put_int(number), ad)

    async def get_job_info(self) -> WireAd:
        dec = await self._call(self._start(GET_JOB_INFO), "get_job_info")
        ad = decode_ad(dec, "job ad")
        dec.finish("get_job_info answer")
        return ad

    async def _ad_call(self, number: int, ad: Mapping[str, str], name: str) -> None:
        dec = await self._call(self._with_ad(number, ad), name)
        dec.finish(f"{name} answer")

    async def register_starter_info(self, ad: Mapping[str, str]) -> None:
        await self._ad_call(REGISTER_STARTER_INFO, ad, "register_starter_info")

    async def register_job_info(self, ad: Mapping[str, str]) -> None:
        if self.update_extra is not None and (extra := self.update_extra()):
            ad = {**dict(ad), **extra}
        await self._ad_call(REGISTER_JOB_INFO, ad, "register_job_info")

    @staticmethod
    def _sessions_request(reconnect_info: str,
                          filetrans_info: str) -> Callable[[Encoder], Encoder]:  # fmt: skip
        return lambda enc: enc.put_int(GET_SEC_SESSION_INFO).put_string(reconnect_info) \
            .put_string(filetrans_info)  # fmt: skip

    async def _sessions_once(self, reconnect_info: str, filetrans_info: str) -> SecSessionInfo:
        """get_sec_session_info on the current connection, once (under the lock)."""
        dec = await self._once(self._sessions_request(reconnect_info, filetrans_info), True)
        assert dec is not None
        return _sessions(_checked(dec, "get_sec_session_info"))

    async def get_sec_session_info(self, reconnect_info: str = "",
                                   filetrans_info: str = "") -> SecSessionInfo:  # fmt: skip
        dec = await self._call(self._sessions_request(reconnect_info, filetrans_info),
                               "get_sec_session_info")  # fmt: skip
        self.sessions = _sessions(dec)
        return self.sessions

    async def begin_execution(self) -> None:
        dec = await self._call(self._start(BEGIN_EXECUTION), "begin_execution")
        dec.finish("begin_execution answer")

    async def event_notification(self, ad: Mapping[str, str]) -> int:
        """The shadow's rval (it answers -3 to events it does not act on; no errno)."""
        dec = await self._exchange(self._with_ad(EVENT_NOTIFICATION, ad))
        assert dec is not None
        rval = dec.get_int32("event_notification rval")
        dec.finish("event_notification answer")
        return rval

    async def job_exit(self, status: int, reason: int, ad: Mapping[str, str]) -> None:
        def build(enc: Encoder) -> Encoder:
            return encode_ad(enc.put_int(JOB_EXIT).put_int(status).put_int(reason), ad)

        dec = await self._call(build, "job_exit")
        dec.finish("job_exit answer")

    async def get_job_attr(self, name: str) -> str:
        """The job ad's expression for `name` as the shadow holds it (Chirp's
        get_job_attr); SyscallError with EACCES where the shadow refuses."""
        dec = await self._call(lambda enc: enc.put_int(GET_JOB_ATTR).put_string(name),
                               "get_job_attr")  # fmt: skip
        expr = dec.get_string("get_job_attr expression")
        dec.finish("get_job_attr answer")
        return expr

    async def set_job_attr(self, name: str, expr: str) -> None:
        """Set `name` to `expr` in the job's ad in the schedd (Chirp's set_job_attr); the
        shadow refuses protected attributes and jobs without WantIOProxy (EACCES)."""
        dec = await self._call(
            lambda enc: enc.put_int(SET_JOB_ATTR).put_string(expr).put_string(name),
            "set_job_attr")  # fmt: skip
        dec.finish("set_job_attr answer")

    async def ulog(self, ad: Mapping[str, str]) -> None:
        """A user-log event for the shadow to write; the shadow sends no answer."""
        await self._exchange(self._with_ad(ULOG, ad), answer=False)


def checked_rval(dec: Decoder, name: str) -> int:
    """An answer's rval; a negative one and its errno raise SyscallError."""
    rval = dec.get_int32(f"{name} rval")
    if rval < 0:
        errno = wire_errno(dec.get_int32(f"{name} errno"))
        raise SyscallError(f"the shadow failed {name}: rval {rval}, errno {errno}", errno)
    return rval


def _checked(dec: Decoder, name: str) -> Decoder:
    checked_rval(dec, name)
    return dec


def _sessions(dec: Decoder) -> SecSessionInfo:
    names = ("reconnect session id", "reconnect session info", "reconnect session key",
             "filetrans session id", "filetrans session info", "filetrans session key")
    values = [dec.get_string(n) for n in names]
    dec.finish("get_sec_session_info answer")
    return SecSessionInfo(*values)


async def send_update(calls: ShadowSyscalls, ad: WireAd,
                      on_update: Callable[[WireAd], None] | None) -> None:  # fmt: skip
    """register_job_info, and the same update for the startd side (`on_update`)."""
    if on_update is not None:
        on_update(ad)
    await calls.register_job_info(ad)
