"""Reading the STARTD_HISTORY file(s) for a remote `condor_history -startd` query, as the
`condor_history -inherit` child condor_startd starts for GET_HISTORY reads them.

The files: the knob's path and its rotated backups beside it, `<name>.<ISO 8601 local
time>` (e.g. `startd_history.20250101T120000`), oldest first and the current file last
(historyFileFinder.cpp); a query reads them newest record first unless it asks for
HistoryReadForwards. A record is the ad's `Attr = expression` lines followed by a banner
line starting with `***` (`*** Offset = ... ClusterId = ... CurrentTime = ...`); a banner
whose first word before the first `=` is followed by more words names the record's type
(`*** EPOCH ...`), else the record is a JOB one, the only type read unless the query's
HistoryAdTypeFilter says otherwise.

What condor_history does with odd files, copied here because a client sees it:
- newest first, lines after the last banner (a record being written) are not read; a
  record with a line that is not `Attr = expression` (or a line of blanks) is skipped
  without being counted; blank lines and `#` comments are ignored;
- oldest first, the type filter is not applied, a bad line skips the rest of its record
  through the next banner, and lines after the last banner are read as one more record.
The scan stops after `match_limit` matches or `scan_limit` records read (either <= 0: no
limit), or at the first record `since` is true of (that record not sent).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from execd import classads
from execd._htcondor import classad2
from execd.daemon.startd_history import ATTRIBUTE_NAME
from execd.errors import ExecdError
from execd.wire.classad_codec import WireAd, is_private, unparse_old

BANNER = "***"
READ_CHUNK = 64 * 1024
TRANSFER_TYPES = ("INPUT", "OUTPUT", "CHECKPOINT")


@dataclass(frozen=True)
class HistoryQuery:
    """What one GET_HISTORY asks for, as the history child gets it on its command line."""

    requirements: Any = None  # classad2.ExprTree, or None: every record
    since: Any = None  # classad2.ExprTree: stop at the first record it is true of
    projection: tuple[str, ...] = ()  # attribute names; empty: the whole ad
    match_limit: int = -1  # <= 0: no limit
    scan_limit: int = 2_000_000_000  # records read at most; <= 0: no limit
    forwards: bool = False
    ad_types: frozenset[str] = frozenset({"JOB"})  # upper case; "ALL": any


@dataclass
class ScanCounts:
    read: int = 0  # condor_history's AdCount
    matched: int = 0  # its NumJobMatches
    stopped: bool = field(default=False, repr=False)


def ad_types(filter_text: str) -> frozenset[str]:
    """HistoryAdTypeFilter (`-type`) as the set of record types read."""
    found: set[str] = set()
    for written in re.split(r"[\s,]+", filter_text.strip()):
        word = written.upper()
        if not word:
            continue
        if word == "ALL":
            return frozenset({"ALL"})
        found.update(TRANSFER_TYPES if word == "TRANSFER" else (word,))
    return frozenset(found) or frozenset({"JOB"})


# ----- the files ------------------------------------------------------------------------
def _leading_int(text: str) -> int:
    """C's atoi: optional blanks and sign, then digits; 0 when there are none."""
    found = re.match(r"\s*([+-]?\d+)", text)
    return int(found.group(1)) if found else 0


def backup_time(name: str, base: str) -> float | None:
    """When a rotated backup `<base>.<time>` was made (its local time), None when `name`
    is not one: HTCondor's lenient ISO 8601 reading (iso8601_to_time), UTC excluded."""
    if not name.startswith(base + "."):
        return None
    stamp = name[len(base) + 1:]
    if len(stamp) <= 2 or stamp[0] == "T" or stamp[2] == ":":
        return None  # a time without a date: no year, never a backup
    pos = 0
    fields: list[int] = []
    for width in (4, 2, 2, 2, 2, 2):
        while pos < len(stamp) and stamp[pos] in ":-T":
            pos += 1
        piece = stamp[pos:pos + width]
        pos += len(piece)
        if len(piece) != width:
            return None
        fields.append(_leading_int(piece))
    if pos < len(stamp) and stamp[pos] == ".":
        pos += 1
        while pos < len(stamp) and stamp[pos].isdigit():
            pos += 1
    year, month, day, hour, minute, second = fields
    if year == 1899 or month == 0 or day == -1 or stamp[pos:pos + 1].upper() == "Z":
        return None  # a field HTCondor reads as "missing" (-1), or a UTC time
    try:
        return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


def history_files(path: str) -> list[str]:
    """The history file's rotated backups, oldest first, then the file itself (if it
    exists); [] when neither exists or the directory cannot be read."""
    directory, base = os.path.split(path)
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    backups = [(when, name) for name in names
               if name != base and (when := backup_time(name, base)) is not None]  # fmt: skip
    found = [os.path.join(directory, name) for _when, name in sorted(backups)]
    return [*found, path] if base in names else found


def _lines_backwards(path: str) -> Iterator[str | None]:
    """The file's lines, last first; None after each chunk read that ended no line (a
    long stretch without a newline), so that the reader can give the loop a turn. The
    pieces of a line are kept in a list and joined once: linear in the line's length."""
    with open(path, "rb") as file:
        end = file.seek(0, os.SEEK_END)
        pieces: list[bytes] = []  # the start of the current line, last piece first
        while end > 0:
            start = max(0, end - READ_CHUNK)
            file.seek(start)
            chunk = file.read(end - start)
            end = start
            lines = chunk.split(b"\n")
            if len(lines) == 1:
                pieces.append(chunk)
                yield None
                continue
            pieces.append(lines[-1])
            yield b"".join(reversed(pieces)).decode("utf-8", "replace")
            for line in reversed(lines[1:-1]):
                yield line.decode("utf-8", "replace")
            pieces = [lines[0]]
        yield b"".join(reversed(pieces)).decode("utf-8", "replace")


def _skipped(line: str) -> bool:
    """A blank line or a comment."""
    stripped = line.lstrip(" \t")
    return not stripped or stripped[0] == "#"


def banner_type(banner: str) -> str | None:
    """The record type a banner names (getAdTypeFromBanner); None: a banner without any
    `=`, whose record is read whatever the filter."""
    equals = banner.find("=")
    if equals < 0:
        return None
    p = 0
    while p < len(banner) and banner[p] == "*":
        p += 1
    while p < len(banner) and banner[p].isspace():
        p += 1
    end = equals - 1
    while p < end and banner[end].isspace():
        end -= 1
    words = banner[p:end]
    if " " not in words and "\t" not in words:
        return "JOB"
    return re.split(r"\s", banner[p:end])[0].upper()


def _parse_old(text: str) -> Any | None:
    try:
        return classad2.parseOne(text, parser=classad2.ParserType.Old)
    except (classad2.ClassAdException, ValueError):
        return None


def _insert_name(line: str) -> str | None:
    """The name ClassAd::Insert takes from an old-syntax line: the text before the
    first `=`, leading blanks and trailing spaces off (`My Attr` too); None when there
    is no `=`, no name, a quoted one or no expression."""
    name, sep, expr = line.lstrip().partition("=")
    name = name.rstrip(" ")
    if not sep or not name or name[0] == "'" or not expr.strip():
        return None
    return name


def parse_record(lines: list[str]) -> Any | None:
    """A record's lines (file order) as a ClassAd; None when a line is not
    `Attr = expression` (a later line for the same attribute wins)."""
    names: set[str] = set()
    plain = True
    for line in lines:
        name = _insert_name(line)
        if name is None:
            return None
        plain = plain and ATTRIBUTE_NAME.fullmatch(name.strip()) is not None
        names.add(name.strip().lower())
    # The whole record in one parse costs a third of line by line; where it reads
    # otherwise (a line that does not parse, an expression over two lines) the count of
    # attributes differs and each line is parsed alone, as condor_history inserts them.
    whole = _parse_old("\n".join(lines)) if plain else None
    if whole is not None and len(whole) == len(names):
        return whole
    ad = classad2.ClassAd()
    for line in lines:
        name = _insert_name(line) or ""
        if ATTRIBUTE_NAME.fullmatch(name.strip()):
            name = name.strip()
            one = _parse_old(line)
        else:  # a name the parser would not take: its expression under a stand-in
            one = _parse_old("_ = " + line.partition("=")[2])
        if one is None or len(one) != 1:
            return None
        ad[name] = one.lookup(next(iter(one.keys())))
    return ad


class HistoryScan:
    """Records of the files, newest first (or oldest first), that `query` matches."""

    def __init__(self, query: HistoryQuery) -> None:
        self.query = query
        self.counts = ScanCounts()

    def done(self) -> bool:
        q, c = self.query, self.counts
        return c.stopped or (q.match_limit > 0 and c.matched >= q.match_limit) or \
            (q.scan_limit > 0 and c.read >= q.scan_limit)  # fmt: skip

    def records(self, files: list[str]) -> Iterator[Any | None]:
        """For each record read, its ad if it matches, else None (a record that is not
        an ad counts for nothing); None too after a stretch read without a whole record.
        A file gone since it was listed (a backup rotated away) is skipped; OSError when
        a file cannot be opened for another reason."""
        for path in files if self.query.forwards else reversed(files):
            if self.done():
                return
            records = self._forwards(path) if self.query.forwards else self._backwards(path)
            try:
                for lines in records:
                    if lines is None:
                        yield None
                        continue
                    ad = parse_record(lines)
                    yield ad if ad is not None and self._matches(ad) else None
                    if self.done():
                        return
            except FileNotFoundError:
                continue  # raised only by the open: an open file stays readable

    def _matches(self, ad: Any) -> bool:
        self.counts.read += 1
        if self.query.since is not None and _true(self.query.since, ad):
            self.counts.stopped = True
            return False
        if self.query.requirements is not None and not _true(self.query.requirements, ad):
            return False
        self.counts.matched += 1
        return True

    def _wanted(self, banner: str) -> bool:
        kind = banner_type(banner)
        return kind is None or "ALL" in self.query.ad_types or kind in self.query.ad_types

    def _backwards(self, path: str) -> Iterator[list[str] | None]:
        lines = _lines_backwards(path)
        banner = ""
        for line in lines:
            if line is None:
                yield None
            elif line.startswith(BANNER):
                banner = line
                break
        wanted = self._wanted(banner)
        record: list[str] = []
        for line in lines:
            if line is None:
                yield None
            elif line.startswith(BANNER):
                if record:
                    yield record[::-1]
                    record = []
                wanted = self._wanted(line)
                if self.done():
                    return
            elif wanted and line and line.lstrip(" \t")[:1] != "#":
                record.append(line)  # a line of blanks too: it spoils its record
        if record and not self.done():
            yield record[::-1]

    def _forwards(self, path: str) -> Iterator[list[str] | None]:
        """A bad line skips its record through the next banner (parse_record says so)."""
        record: list[str] = []
        with open(path, encoding="utf-8", errors="replace", newline="\n") as file:
            for raw in file:
                line = raw.rstrip("\n")
                if line.startswith(BANNER):
                    if record:
                        yield record
                    record = []
                elif not _skipped(line):
                    record.append(line)
        if record:
            yield record


def _true(expr: Any, ad: Any) -> bool:
    try:
        return classads.is_true(classads.evaluate(expr, ad))
    except (ExecdError, ValueError):  # a string Python cannot decode ("\377"): no boolean
        return False


def projected(ad: Any, projection: tuple[str, ...]) -> WireAd:
    """The ad as sent (putClassAd): with a projection, each named attribute the ad has
    and the attributes of the ad its expression refers to, in case-insensitive name
    order; private attributes never (the file's writer leaves them out anyway)."""
    if not projection:
        return {k: v for k, v in _unparsed(ad).items() if not is_private(k)}
    names: dict[str, str] = {}
    for name in projection:
        if name in ad:
            names.setdefault(name.lower(), name)
            for ref in ad.internalRefs(ad.lookup(name)):
                names.setdefault(str(ref).lower(), str(ref))
    return {names[key]: unparse_old(ad.lookup(names[key])) for key in sorted(names)
            if names[key] in ad and not is_private(names[key])}  # fmt: skip


def _unparsed(ad: Any) -> WireAd:
    """Every attribute's old-syntax text: one printOld of the ad (a tenth of the cost of
    one per attribute) unless a value spans lines (a string holding a newline)."""
    lines = ad.printOld().split("\n")[:-1]
    if len(lines) != len(ad) or any(line.startswith("'") for line in lines):  # `'My Attr'`
        return {k: unparse_old(ad.lookup(k)) for k in ad}
    return dict(line.split(" = ", 1) for line in lines)
