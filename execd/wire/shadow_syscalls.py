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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from execd.errors import RemoteProtocolError
from execd.wire.classad_codec import WireAd, decode_ad, encode_ad
from execd.wire.encoding import Decoder, Encoder

GET_JOB_INFO = -63
JOB_EXIT = -65
REGISTER_STARTER_INFO = -77
BEGIN_EXECUTION = -78
REGISTER_JOB_INFO = -81
ULOG = 284
GET_SEC_SESSION_INFO = 288
EVENT_NOTIFICATION = 304

# Reasons for job_exit (condor_includes/exit.h).
JOB_EXITED = 100
JOB_COREDUMPED = 103
JOB_SHOULD_REQUEUE = 107  # killed on request (vacate, remove): os_proc.cpp JobExit
JOB_SHOULD_HOLD = 112


class MessageChannel(Protocol):
    """What the syscall and file transfer code needs of a connection (Channel has it)."""

    async def send(self, payload: bytes) -> None: ...
    async def recv(self, timeout_s: float | None = None) -> bytes: ...
    def encoder(self) -> Encoder: ...
    def decoder(self, payload: bytes) -> Decoder: ...


class SyscallError(RemoteProtocolError):
    """The shadow answered a call with a failure (rval < 0 and its errno)."""


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

    def __init__(self, channel: MessageChannel, *, timeout_s: float = 300.0) -> None:
        self.channel = channel
        self.timeout_s = timeout_s

    async def _call(self, enc: Encoder, name: str) -> Decoder:
        await self.channel.send(enc.payload())
        dec = self.channel.decoder(await self.channel.recv(self.timeout_s))
        rval = dec.get_int32(f"{name} rval")
        if rval < 0:
            errno = dec.get_int32(f"{name} errno")
            raise SyscallError(f"the shadow failed {name}: rval {rval}, errno {errno}")
        return dec

    def _start(self, number: int) -> Encoder:
        return self.channel.encoder().put_int(number)

    async def get_job_info(self) -> WireAd:
        dec = await self._call(self._start(GET_JOB_INFO), "get_job_info")
        ad = decode_ad(dec, "job ad")
        dec.finish("get_job_info answer")
        return ad

    async def _ad_call(self, number: int, ad: Mapping[str, str], name: str) -> None:
        dec = await self._call(encode_ad(self._start(number), ad), name)
        dec.finish(f"{name} answer")

    async def register_starter_info(self, ad: Mapping[str, str]) -> None:
        await self._ad_call(REGISTER_STARTER_INFO, ad, "register_starter_info")

    async def register_job_info(self, ad: Mapping[str, str]) -> None:
        await self._ad_call(REGISTER_JOB_INFO, ad, "register_job_info")

    async def get_sec_session_info(self, reconnect_info: str = "",
                                   filetrans_info: str = "") -> SecSessionInfo:  # fmt: skip
        enc = self._start(GET_SEC_SESSION_INFO).put_string(reconnect_info)
        dec = await self._call(enc.put_string(filetrans_info), "get_sec_session_info")
        names = ("reconnect session id", "reconnect session info", "reconnect session key",
                 "filetrans session id", "filetrans session info", "filetrans session key")
        values = [dec.get_string(n) for n in names]
        dec.finish("get_sec_session_info answer")
        return SecSessionInfo(*values)

    async def begin_execution(self) -> None:
        dec = await self._call(self._start(BEGIN_EXECUTION), "begin_execution")
        dec.finish("begin_execution answer")

    async def event_notification(self, ad: Mapping[str, str]) -> int:
        """The shadow's rval (it answers -3 to events it does not act on; no errno)."""
        await self.channel.send(encode_ad(self._start(EVENT_NOTIFICATION), ad).payload())
        dec = self.channel.decoder(await self.channel.recv(self.timeout_s))
        rval = dec.get_int32("event_notification rval")
        dec.finish("event_notification answer")
        return rval

    async def job_exit(self, status: int, reason: int, ad: Mapping[str, str]) -> None:
        enc = self._start(JOB_EXIT).put_int(status).put_int(reason)
        dec = await self._call(encode_ad(enc, ad), "job_exit")
        dec.finish("job_exit answer")

    async def ulog(self, ad: Mapping[str, str]) -> None:
        """A user-log event for the shadow to write; the shadow sends no answer."""
        await self.channel.send(encode_ad(self._start(ULOG), ad).payload())
