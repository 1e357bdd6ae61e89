"""The job's streamed std files (stream_output, stream_error) around its run: made
before it starts, copied while it runs, drained after it exits, handed to the next image
on a restart in place. One stream's copy is OutputStream (execd/wire/stream_output.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from execd.classads import lookup_bool
from execd.log import get_logger
from execd.wire.chirp_files import O_CREAT, O_TRUNC, O_WRONLY
from execd.wire.job_runner import JobExit
from execd.wire.shadow_file_calls import ShadowFileCalls
from execd.wire.stream_output import OutputStream

__all__ = ["DRAIN_S", "STREAMS", "StreamedOutput", "open_flags", "streamed"]
log = get_logger("wire")

# After the job has exited, how long its streams go on at most (a process that outlived
# the job could hold the pipe open, and write without end: its cgroup is killed, but a
# job run without one is not; condor_starter kills the job's process family at its exit).
# Time without a connection to the shadow does not count: from the last call it answered
# (a shadow that stopped answering is noticed a call's timeout later) to its reconnect.
DRAIN_S = 300.0


STREAMS = (("Out", "StreamOut", "stdout", "standard output"),
           ("Err", "StreamErr", "stderr", "standard error"))  # fmt: skip


def open_flags(job: dict[str, object]) -> int:
    """The streamed files' open flags, as condor_starter's VanillaProc::streamingOpenFlags:
    appended to (O_APPEND, which StreamHandler::Init turns into a seek to the end) for a
    job that checkpoints (WantCheckpointSignal, WantFTOnCheckpoint) or keeps its output
    on a restart (EraseOutputAndErrorOnRestart = false); else created and truncated.
    Each is read as condor's LookupBool reads it: a number is true where it is not 0."""
    if lookup_bool(job.get("WantCheckpointSignal")) is True \
            or lookup_bool(job.get("WantFTOnCheckpoint")) is True \
            or lookup_bool(job.get("EraseOutputAndErrorOnRestart")) is False:  # fmt: skip
        return O_CREAT | O_WRONLY
    return O_CREAT | O_TRUNC | O_WRONLY


def streamed(job: dict[str, object], attr: str) -> bool:
    """Whether the job's Out or Err is streamed: its StreamOut/StreamErr is true (as
    LookupBool takes it: jic_shadow's streamOutput) and it names a file (not
    /dev/null), as condor_starter's getStdFile decides."""
    flag = dict((a, s) for a, s, _, _ in STREAMS)[attr]
    path = job.get(attr)
    return lookup_bool(job.get(flag)) is True and isinstance(path, str) \
        and path not in ("", os.devnull)  # fmt: skip


class StreamedOutput:
    """The job's streamed std files (none, one or both) around its run."""

    def __init__(self, streams: dict[str, OutputStream]) -> None:
        self.streams = streams  # by attribute: "Out", "Err"

    @classmethod
    def for_job(cls, calls: ShadowFileCalls, job: dict[str, object], sandbox: Path,
                gjid: str) -> StreamedOutput:  # fmt: skip
        streams = {}
        for attr, _, name, _ in STREAMS:
            if streamed(job, attr):
                fifo = sandbox.with_name(f"{sandbox.name}.{name}")
                stream = OutputStream(calls, str(job[attr]), name, fifo, gjid)
                stream.flags = open_flags(job)
                streams[attr] = stream
        return cls(streams)

    @classmethod
    def adopted(cls, calls: ShadowFileCalls, records: dict[str, Any] | None,
                gjid: str) -> StreamedOutput:  # fmt: skip
        """The streams the old image handed over (export), those this process has."""
        streams = {}
        for attr, record in (records or {}).items():
            if isinstance(record, dict) and \
                    (stream := OutputStream.adopted(calls, record, gjid)) is not None:
                streams[attr] = stream
                log.info("stream_adopted", job=gjid, stream=stream.name, offset=stream.offset)
        return cls(streams)

    def export(self) -> dict[str, Any] | None:
        """Each stream's record for the next image (None: no stream)."""
        records = {attr: record for attr, stream in self.streams.items()
                   if (record := stream.export()) is not None}  # fmt: skip
        return records or None

    def fifo(self, attr: str) -> str | None:
        stream = self.streams.get(attr)
        return str(stream.fifo) if stream is not None else None

    async def open(self, uid: int, gid: int) -> None:
        """The shadow's files opened (JobHeldError where one cannot be), the FIFOs made."""
        for attr, _, _, phrase in STREAMS:
            if (stream := self.streams.get(attr)) is not None:
                await stream.open(phrase)
                stream.make_fifo(uid, gid)

    def started(self) -> None:
        """The job has its std files open: end of stream now means its end."""
        for stream in self.streams.values():
            stream.release_hold()

    async def alongside(self, run: Awaitable[JobExit], kill: Callable[[], None],
                        exited: Callable[[], Awaitable[None]] | None = None,
                        ) -> JobExit:  # fmt: skip
        """The job's run with its streams copied meanwhile; once it has exited,
        `exited()` (what must end with the job, not with its output: condor_tail, ssh
        to the job), then the rest of its output (until its writers' end of stream,
        DRAIN_S at most, not counting waits for the shadow's reconnect; what was read
        is sent in full, after a reconnect if need be). A stream that fails (the job
        held, the shadow gone) ends the job: its error is raised."""
        job: asyncio.Future[JobExit] = asyncio.ensure_future(run)
        if not self.streams:
            exit_ = await job
            if exited is not None:
                await exited()
            return exit_
        copies = [asyncio.ensure_future(s.run()) for s in self.streams.values()]
        try:
            waiting: set[asyncio.Future[Any]] = {job, *copies}
            while not job.done():
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is not job and (error := task.exception()) is not None:
                        kill()
                        raise error
            exit_ = job.result()
            if exited is not None:
                await exited()
            self.started()  # a job that never started: its streams end now
            for stream in self.streams.values():
                stream.drain(DRAIN_S)
            await asyncio.gather(*copies)
            return exit_
        finally:
            job.cancel()
            for copy in copies:
                copy.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.gather(job, *copies, return_exceptions=True)

    def close(self, handed_over: bool = False) -> None:
        for stream in self.streams.values():
            stream.close(handed_over)
