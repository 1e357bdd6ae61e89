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
evaluation failing included, 6 a DAEMON source without DaemonHistorySubsys, 9 more than
MAX_WAITING queries waiting (checked before the knob, as condor_startd does) or a wait
too long, 5 the history knob undefined. Where condor_startd's child would end without a
word (HistoryReadForwards with Since, a literal Since that is no job id, a
HistoryAdTypeFilter starting with `-`, HistoryFromDir naming no directory, a file it
cannot open) the connection closes without one; condor_history then says "Failed to receive
remote ad." and exits 1.

condor_startd forks a child per query; execd reads in its own event loop, which also
serves claims, activations and the shadows, so it bounds what history may take of it:
- at most min(HISTORY_HELPER_MAX_CONCURRENCY, SCANS_AT_ONCE) queries are read at once
  (the loop runs one at a time anyway: more at once adds no speed, only latency);
- a query hands the loop back after YIELD_AFTER_S of work (and after each 64 KB read of
  a line without end);
- MAX_WAITING more may wait (condor_startd: 1000; execd's is well below the wire
  server's 256 connections, so history cannot hold them all), each WAIT_DEADLINE_S at
  most (then error 9), and a query ends after QUERY_DEADLINE_S whatever it is doing
  (a client that reads slowly holds a turn no longer);
- an answer without StreamResults goes out in packets as its buffer passes FLUSH_BYTES,
  one CEDAR message still, so it is never held whole in memory.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from typing import TYPE_CHECKING, Any

from execd import log
from execd._htcondor import classad2
from execd.daemon.startd_history_query import HistoryQuery, HistoryScan, ad_types, history_files
from execd.daemon.startd_history_query import projected as projected_ad
from execd.errors import ExecdError, LocalProtocolError, ProtocolError
from execd.wire.classad_codec import decode_ad, encode_ad, from_values, to_classad, unparse_old
from execd.wire.encoding import Encoder
from execd.wire.framing import SEND_PACKET_BYTES

if TYPE_CHECKING:
    from execd.config.settings import Settings
    from execd.wire.channel import Channel
    from execd.wire.server import Peer

logger = log.get_logger("pool")

MAX_WAITING = 16  # queries waiting for a turn (condor_startd: 1000, not a knob)
SCANS_AT_ONCE = 4  # execd's own cap on queries read at once, below the knob's default 50
YIELD_AFTER_S = 0.002  # work between turns of the event loop
WAIT_DEADLINE_S = 60.0  # a query waiting longer for a turn gets error 9
QUERY_DEADLINE_S = 300.0  # a query (read and sent) taking longer is ended
FLUSH_BYTES = 16 * SEND_PACKET_BYTES  # a non-streamed answer's buffer, sent when full
DEFAULT_MAX_HISTORY = 2_000_000_000
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


def _inside_parentheses(text: str) -> str:
    """`text` without the parentheses around the whole of it, if any (as
    ExprTreeIsLiteral dives into them); strings are skipped over."""
    while text.startswith("(") and text.endswith(")"):
        depth, quoted, escaped = 0, False, False
        for i, char in enumerate(text):
            if quoted:
                quoted, escaped = (char != '"' or escaped), (char == "\\" and not escaped)
            elif char == '"':
                quoted = True
            elif char in "()":
                depth += 1 if char == "(" else -1
                if depth == 0 and i < len(text) - 1:
                    return text  # `(a) + (b)`: the first one closes early
        text = text[1:-1].strip()
    return text


def _is_literal(expr: Any) -> bool:
    """Whether the expression is a literal value, in parentheses or not (HTCondor's
    ExprTreeIsLiteral): its text is that of its own value. `e` (a reference), `1 + 1`
    and `{1}` are not; `7`, `(7)`, `"x"`, `undefined` are."""
    inner = _inside_parentheses(unparse_old(expr))
    try:
        tree = to_classad({"S": inner}).lookup("S")
        value = tree.eval()
        if isinstance(value, list | classad2.ClassAd):
            return False  # a list or a nested ad is a node of its own, no Literal
        return bool(unparse_old(to_classad(from_values({"S": value})).lookup("S")) == inner)
    except (ExecdError, ValueError, TypeError, KeyError):
        return False


def _since(query: Any) -> Any:
    """Since as condor_history's -since reads the text it is given: an expression, or a
    literal that must be a job id (`7`, `7.1`); no answer otherwise (`(7)`, `"x"`)."""
    if "Since" not in query:
        return None
    expr = query.lookup("Since")
    if not _is_literal(expr):
        return expr
    text = unparse_old(expr)
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


def refuse_early(query: Any, settings: Settings) -> None:
    """The errors condor_startd answers before a query may wait: 10, 3, 6."""
    if (settings.get_int("HISTORY_HELPER_MAX_CONCURRENCY") or 0) <= 0:
        raise HistoryError(10, "Remote history has been disabled on this startd")
    _projection(query)
    source = _evaluated(query, "HistoryRecordSource")
    subsys = _evaluated(query, "DaemonHistorySubsys")
    if isinstance(source, str) and source.lower() == "daemon" and not \
            (isinstance(subsys, str) and subsys):  # fmt: skip
        raise HistoryError(6, "Specified daemon history source without subsystem.")


def history_query(query: Any, settings: Settings) -> tuple[HistoryQuery, str]:
    """The query ad as a HistoryQuery and the history file's path; HistoryError or
    NoAnswer as condor_startd (and its child) would answer."""
    refuse_early(query, settings)
    projection = _projection(query)
    source = _evaluated(query, "HistoryRecordSource")
    source = source if isinstance(source, str) else ""
    subsys = _evaluated(query, "DaemonHistorySubsys")
    subsys = subsys if isinstance(subsys, str) else ""
    types = _evaluated(query, "HistoryAdTypeFilter")
    from_dir = _bool(query, "HistoryFromDir")
    knob = "_".join(p for p in (subsys, source, "HISTORY_DIR" if from_dir else "HISTORY") if p)
    path = _param(settings, knob)
    if not path:
        raise HistoryError(5, f"{knob} undefined in remote configuration. "
                              "No such related history to be queried.")  # fmt: skip
    if isinstance(types, str) and types.startswith("-"):  # `-type -x`: a missing argument
        raise NoAnswer(f"HistoryAdTypeFilter {types!r} starts with -")
    if from_dir and not os.path.isdir(path):
        raise NoAnswer(f"{knob} {path} is no directory")
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
    """GET_HISTORY: a few queries read at once, a few more waiting (the module's doc)."""

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def reading(self) -> int:
        return self._reading

    def __init__(self, settings: Any, max_waiting: int = MAX_WAITING, *,
                 wait_deadline_s: float = WAIT_DEADLINE_S,
                 query_deadline_s: float = QUERY_DEADLINE_S) -> None:  # fmt: skip
        self._settings = settings  # a callable: the current Settings (reload changes them)
        self._max_waiting = max_waiting
        self._wait_deadline_s = wait_deadline_s
        self._query_deadline_s = query_deadline_s
        self._reading = 0
        self._waiting: list[asyncio.Future[None]] = []

    def _limit(self) -> int:
        knob = self._settings().get_int("HISTORY_HELPER_MAX_CONCURRENCY") or 0
        return min(knob, SCANS_AT_ONCE)

    async def _turn(self) -> None:
        """A turn to read: at once if one is free, else after waiting (HistoryError 9
        when the waiting room is full or the wait too long)."""
        if self._reading < self._limit() and not self._waiting:
            self._reading += 1
            return
        if len(self._waiting) >= self._max_waiting:
            raise HistoryError(9, "Cowardly refusing to queue more than "
                                  f"{self._max_waiting} requests.")  # fmt: skip
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await asyncio.wait([turn], timeout=self._wait_deadline_s)
        except BaseException:  # cancelled (the server closing): give the turn up
            if turn.done():
                self._release()  # handed one meanwhile: it goes on to the next
            else:
                self._waiting.remove(turn)
                turn.cancel()
            raise
        if not turn.done():
            self._waiting.remove(turn)
            turn.cancel()
            raise HistoryError(9, f"Waited {self._wait_deadline_s:g} s for one of the "
                                  f"{self._reading} history reads to end.")  # fmt: skip

    def _release(self) -> None:
        """The turn goes straight to the first waiter (no newcomer can take it between)."""
        if self._waiting and self._reading <= self._limit():
            self._waiting.pop(0).set_result(None)
        else:
            self._reading -= 1

    async def serve(self, channel: Channel, command: int, peer: Peer) -> None:
        query = to_classad(decode_ad(channel.decoder(await channel.recv(15)), "history query"))
        try:
            refuse_early(query, self._settings())
            await self._turn()
        except HistoryError as exc:
            await self._refuse(channel, peer, exc)
            return
        try:
            parsed, path = history_query(query, self._settings())
        except HistoryError as exc:
            self._release()
            await self._refuse(channel, peer, exc)
            return
        except NoAnswer as exc:
            self._release()
            logger.info("history_query_unanswered", user=peer.user, why=str(exc))
            return
        try:
            async with asyncio.timeout(self._query_deadline_s):
                await self._answer(channel, parsed, path, peer, _bool(query, "StreamResults"))
        except TimeoutError:
            logger.warning("history_query_timed_out", user=peer.user,
                           deadline_s=self._query_deadline_s)  # fmt: skip
        finally:
            self._release()

    @staticmethod
    async def _refuse(channel: Channel, peer: Peer, exc: HistoryError) -> None:
        logger.info("history_query_refused", user=peer.user, code=exc.code, why=str(exc))
        reply = from_values({"Owner": 0, "ErrorString": str(exc), "ErrorCode": exc.code})
        await channel.send(encode_ad(channel.encoder(), reply).payload())

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
        slice_end = time.monotonic() + YIELD_AFTER_S
        try:
            for ad in scan.records(files):
                if ad is not None:
                    encode_ad(enc, projected_ad(ad, query.projection), names_as_read=True)
                    if stream:
                        await channel.send(enc.payload())
                        enc = channel.encoder()
                    elif len(enc) >= FLUSH_BYTES:
                        enc = await _flush(channel, enc)
                if time.monotonic() >= slice_end:
                    await asyncio.sleep(0)  # a long file does not stop the daemon
                    slice_end = time.monotonic() + YIELD_AFTER_S
        except OSError as exc:
            logger.warning("history_file_unreadable", path=path, why=str(exc))
            return  # condor_startd's child ends without its final ad
        except LocalProtocolError as exc:
            logger.warning("history_record_unsendable", path=path, why=str(exc))
            return
        except ProtocolError:
            raise  # the client's end: the wire server logs it
        except Exception as exc:  # one bad record must not end the query without a log line
            logger.error("history_query_failed", path=path, error=type(exc).__name__,
                         why=str(exc))  # fmt: skip
            return
        counts = scan.counts
        final = from_values({"Owner": 0, "NumJobMatches": counts.matched, "MalformedAds": 0,
                             "AdCount": counts.read})  # fmt: skip
        await channel.send(encode_ad(enc, final).payload())
        logger.info("history_query_answered", user=peer.user, matched=counts.matched,
                    read=counts.read)  # fmt: skip


async def _flush(channel: Channel, enc: Encoder) -> Encoder:
    """Send the whole packets of a message being built; keep the rest (at least a byte,
    so that the message's last packet, sent with its end, is never empty)."""
    data = enc.payload()
    cut = (len(data) - 1) // SEND_PACKET_BYTES * SEND_PACKET_BYTES
    await channel.send(data[:cut], end=False)
    rest = channel.encoder()
    rest.put_bytes(data[cut:])
    return rest
