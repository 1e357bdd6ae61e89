"""GET_HISTORY (`condor_history -startd -name <node>`), answered as condor_startd answers it
(history_queue.cpp, whose `condor_history -inherit` child does the reading; execd reads
in its own process: execd.daemon.startd_history_query).

The query ad: Requirements (the constraint, evaluated in each record's ad), Since (stop
at the first record it is true of), NumJobMatches (match limit), ScanLimit (records read
at most; default HISTORY_HELPER_MAX_HISTORY), Projection (attribute names),
HistoryReadForwards, StreamResults, HistoryRecordSource (`STARTD`: the STARTD_HISTORY
file; `<SOURCE>` reads `<SOURCE>_HISTORY`, no source `HISTORY`), HistoryAdTypeFilter.

The answer: with StreamResults an ad {Owner = 1, StreamResults = true} and each matching
ad in a message of its own, else every ad in one message; last {Owner = 0,
NumJobMatches, MalformedAds = 0, AdCount = records read}. An error is one ad
{Owner = 0, ErrorString, ErrorCode}, which condor_history prints as `Error <code>:
<string>` and exits with the code: 10 remote history disabled
(HISTORY_HELPER_MAX_CONCURRENCY = 0), 3 a Projection that is no string (list), its
evaluation failing included, 6 a DAEMON source without DaemonHistorySubsys, 9 more than 1000 queries
waiting, 5 the history knob undefined. Where condor_startd's child would end without a
word (HistoryReadForwards with Since, a literal Since that is no job id, a file it cannot
open) the connection closes without one; condor_history then says "Failed to receive
remote ad." and exits 1.

At most HISTORY_HELPER_MAX_CONCURRENCY queries are read at once, up to 1000 more wait.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from execd import log
from execd.daemon.startd_history_query import HistoryQuery, HistoryScan, ad_types, history_files
from execd.daemon.startd_history_query import projected as projected_ad
from execd.errors import ExecdError, LocalProtocolError
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad, unparse_old

if TYPE_CHECKING:
    from execd.config.settings import Settings
    from execd.wire.channel import Channel
    from execd.wire.server import Peer

logger = log.get_logger("pool")

MAX_WAITING = 1000  # condor_startd's HistoryHelperQueue request limit (not a knob)
DEFAULT_MAX_HISTORY = 2_000_000_000
YIELD_EVERY = 200  # records read between turns of the event loop
LITERAL = re.compile(r'^(-?[\d.eE+-]+|".*"|true|false|undefined|error)$', re.IGNORECASE)
JOB_ID = re.compile(r"^(\d+)(?:\.(\d+))?$")


class HistoryError(ExecdError):
    """A query answered with an error ad."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class NoAnswer(ExecdError):  # noqa: N818 - not an error of execd's: the query's end
    """A query condor_startd's child ends without answering."""


def _evaluated(query: Any, name: str) -> Any:
    return query.eval(name) if name in query else None


def _since(query: Any) -> Any:
    if "Since" not in query:
        return None
    expr = query.lookup("Since")
    text = unparse_old(expr)
    if not LITERAL.match(text):
        return expr
    job = JOB_ID.match(text)  # the child reads a literal as a job id (its -since)
    if job is None:
        raise NoAnswer(f"Since {text} is neither an expression nor a job id")
    cluster, proc = job.groups()
    return to_classad({"S": f"ClusterId == {cluster}" + (f" && ProcId == {proc}" if proc
                                                          else "")}).lookup("S")  # fmt: skip


def _projection(query: Any) -> tuple[str, ...]:
    if "Projection" not in query:
        return ()
    value = query.eval("Projection")
    if isinstance(value, str):
        names = [n for n in re.split(r"[\s,]+", value) if n]
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = list(value)
    else:  # an error value too: condor_startd's evaluation "succeeds" (its error 2 never comes)
        raise HistoryError(3, "Unable to convert projection list to string list")
    return tuple(dict.fromkeys(names))


def _int(query: Any, name: str, default: int) -> int:
    value = _evaluated(query, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _bool(query: Any, name: str) -> bool:
    value = _evaluated(query, name)
    return value if isinstance(value, bool) else False


def _param(settings: Settings, name: str) -> str | None:
    """HTCondor's param(): a knob set to nothing is undefined, its default not used."""
    written = settings.config.get(name)
    if written is not None:
        return written.strip() or None
    return settings.get_str(name)


def history_query(query: Any, settings: Settings) -> tuple[HistoryQuery, str]:
    """The query ad as a HistoryQuery and the history file's path; HistoryError or
    NoAnswer as condor_startd (and its child) would answer."""
    if (settings.get_int("HISTORY_HELPER_MAX_CONCURRENCY") or 0) <= 0:
        raise HistoryError(10, "Remote history has been disabled on this startd")
    projection = _projection(query)
    source = _evaluated(query, "HistoryRecordSource")
    source = source if isinstance(source, str) else ""
    subsys = _evaluated(query, "DaemonHistorySubsys")
    subsys = subsys if isinstance(subsys, str) else ""
    if source.lower() == "daemon" and not subsys:
        raise HistoryError(6, "Specified daemon history source without subsystem.")
    types = _evaluated(query, "HistoryAdTypeFilter")
    from_dir = _bool(query, "HistoryFromDir")
    knob = "_".join(p for p in (subsys, source, "HISTORY_DIR" if from_dir else "HISTORY") if p)
    path = _param(settings, knob)
    if not path:
        raise HistoryError(5, f"{knob} undefined in remote configuration. "
                              "No such related history to be queried.")  # fmt: skip
    forwards = _bool(query, "HistoryReadForwards")
    since = _since(query)
    if forwards and since is not None:
        raise NoAnswer("HistoryReadForwards with Since")
    max_history = settings.get_int("HISTORY_HELPER_MAX_HISTORY")
    parsed = HistoryQuery(
        requirements=query.lookup("Requirements") if "Requirements" in query else None,
        since=since, projection=projection, forwards=forwards,
        match_limit=_int(query, "NumJobMatches", -1),
        scan_limit=_int(query, "ScanLimit", DEFAULT_MAX_HISTORY if max_history is None
                        else max_history),
        ad_types=ad_types(types) if isinstance(types, str) else frozenset({"JOB"}),
    )  # fmt: skip
    return parsed, "" if from_dir else path  # a directory holds no startd history files


class HistoryQueue:
    """GET_HISTORY: at most HISTORY_HELPER_MAX_CONCURRENCY read at once, 1000 waiting."""

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def __init__(self, settings: Any, max_waiting: int = MAX_WAITING) -> None:
        self._settings = settings  # a callable: the current Settings (reload changes them)
        self._max_waiting = max_waiting
        self._reading = 0
        self._waiting: list[asyncio.Future[None]] = []

    async def serve(self, channel: Channel, command: int, peer: Peer) -> None:
        query = to_classad(decode_ad(channel.decoder(await channel.recv(15)), "history query"))
        settings = self._settings()
        try:
            parsed, path = history_query(query, settings)
            limit = settings.get_int("HISTORY_HELPER_MAX_CONCURRENCY") or 0
            if self._reading >= limit:
                if len(self._waiting) >= self._max_waiting:
                    raise HistoryError(9, "Cowardly refusing to queue more than "
                                          f"{self._max_waiting} requests.")  # fmt: skip
                turn = asyncio.get_running_loop().create_future()
                self._waiting.append(turn)
                try:
                    await turn
                finally:
                    if turn in self._waiting:
                        self._waiting.remove(turn)
            self._reading += 1
        except HistoryError as exc:
            logger.info("history_query_refused", user=peer.user, code=exc.code, why=str(exc))
            reply = from_values({"Owner": 0, "ErrorString": str(exc), "ErrorCode": exc.code})
            await channel.send(encode_ad(channel.encoder(), reply).payload())
            return
        except NoAnswer as exc:
            logger.info("history_query_unanswered", user=peer.user, why=str(exc))
            return
        try:
            await self._answer(channel, parsed, path, peer, _bool(query, "StreamResults"))
        finally:
            self._reading -= 1
            if self._waiting:
                turn = self._waiting.pop(0)
                if not turn.done():
                    turn.set_result(None)

    @staticmethod
    async def _answer(channel: Channel, query: HistoryQuery, path: str, peer: Peer,
                      stream: bool) -> None:  # fmt: skip
        scan = HistoryScan(query)
        enc = channel.encoder()
        if stream:
            await channel.send(encode_ad(enc, from_values({"Owner": 1, "StreamResults": True}))
                               .payload())  # fmt: skip
            enc = channel.encoder()
        files = history_files(path) if path else []
        try:
            for ad in scan.records(files):
                if ad is not None:
                    encode_ad(enc, projected_ad(ad, query.projection))
                    if stream:
                        await channel.send(enc.payload())
                        enc = channel.encoder()
                if scan.counts.read % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a long file does not stop the daemon
        except OSError as exc:
            logger.warning("history_file_unreadable", path=path, why=str(exc))
            return  # condor_startd's child ends without its final ad
        except LocalProtocolError as exc:
            logger.warning("history_record_unsendable", path=path, why=str(exc))
            return
        counts = scan.counts
        final = from_values({"Owner": 0, "NumJobMatches": counts.matched, "MalformedAds": 0,
                             "AdCount": counts.read})  # fmt: skip
        await channel.send(encode_ad(enc, final).payload())
        logger.info("history_query_answered", user=peer.user, matched=counts.matched,
                    read=counts.read)  # fmt: skip
