"""The startd history file (STARTD_HISTORY): the ad of every job that ended here, as
condor_startd appends it (classadHistory.cpp AppendHistory) for `condor_history -startd
-file` and condor_adstash.

A record is the job's ad, one `Attr = expression` line per attribute in old ClassAd
syntax, ordered as HTCondor's FastSort orders them (by name length, then name without
regard to case), private attributes (ClaimId, Capability, TransferKey, ...) left out, then
a banner line:

    *** Offset = <where the previous banner starts> ClusterId = <n> ProcId = <n> \
Owner = "<owner>" CompletionDate = <t> CurrentTime = <now>

(-1, -1, "?" and -1 where the ad has no ClusterId, ProcId, Owner or CompletionDate).
`HISTORY_CONTAINS_JOB_ENVIRONMENT = false` leaves out `Env` and `Environment`. A record
is one attribute a line whatever the ad holds: a carriage return or newline in a value is
written `\r` / `\n` (as the new ClassAd unparser escapes it), and an attribute whose name
is no ClassAd name (a local submitter's ad may hold anything) is left out, so no line of
it can start with `***` or end it early. The file is created 0644, as condor's is.

Rotation, as MaybeRotateHistory (ENABLE_HISTORY_ROTATION, default true): before a record
would take the file past MAX_HISTORY_LOG bytes (default 20 MiB), or on the first record of
a new day (ROTATE_HISTORY_DAILY) or month (ROTATE_HISTORY_MONTHLY) after the file's last
change, the file is renamed `<file>.<local time, YYYYMMDDTHHMMSS>`, after the oldest
such files beyond MAX_HISTORY_ROTATIONS - 1 (default 2, at least 1) are removed. A
rotation that fails is logged (`startd_history_not_rotated`) and the record is appended
all the same, as condor's "Failed to rotate" goes on.

STARTD_PER_JOB_HISTORY_DIR (unset by default): each record also goes, without its banner,
into `history.<GlobalJobId>` there, written to a fresh temporary file and renamed; a
GlobalJobId holding `/` or NUL gets no such file. It is written apart from STARTD_HISTORY
(condor's WritePerJobHistoryFile): its failure is `per_job_history_not_written`.

A file that cannot be written costs the record and an error in the log
(`startd_history_not_written`), never the job; the record counts as written when the
whole of it went into STARTD_HISTORY. STARTD_HISTORY empty writes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from execd import log
from execd.wire.classad_codec import is_private

logger = log.get_logger("history")

DEFAULT_MAX_BYTES = 20 * 1024 * 1024  # MAX_HISTORY_LOG's default, in condor's code
DEFAULT_ROTATIONS = 2  # MAX_HISTORY_ROTATIONS's default (and 1 at least)
ENVIRONMENT_ATTRS = frozenset({"env", "environment"})  # HISTORY_CONTAINS_JOB_ENVIRONMENT
OFFSET_JUMP = 200  # findHistoryOffset reads backwards in steps of this many bytes
BACKUP_SUFFIX = re.compile(r"^\d{8}T\d{6}$")  # <file>.20250101T120000
ATTRIBUTE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")  # a ClassAd's, unquoted: fullmatch
LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r"})


@dataclass(frozen=True)
class HistoryConfig:
    """The history knobs, read from the daemon's settings."""

    path: Path | None  # None: STARTD_HISTORY empty, no history
    rotation: bool = True
    max_bytes: int = DEFAULT_MAX_BYTES
    rotations: int = DEFAULT_ROTATIONS
    daily: bool = False
    monthly: bool = False
    with_environment: bool = True
    per_job_dir: Path | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> HistoryConfig:
        # set empty: no history (HTCondor's param() gives nothing); unset: the default
        written = settings.config.get("STARTD_HISTORY", subsystem="STARTD")
        path = "" if written is not None and not written.strip() else \
            (settings.get_str("STARTD_HISTORY") or "")  # fmt: skip
        per_job = (settings.get_str("STARTD_PER_JOB_HISTORY_DIR") or "").strip()
        max_bytes = settings.get_int("MAX_HISTORY_LOG")
        rotations = settings.get_int("MAX_HISTORY_ROTATIONS")
        return cls(
            path=Path(path) if path else None,
            rotation=settings.get_bool("ENABLE_HISTORY_ROTATION", True),
            max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
            rotations=max(1, DEFAULT_ROTATIONS if rotations is None else rotations),
            daily=settings.get_bool("ROTATE_HISTORY_DAILY"),
            monthly=settings.get_bool("ROTATE_HISTORY_MONTHLY"),
            with_environment=settings.get_bool("HISTORY_CONTAINS_JOB_ENVIRONMENT", True),
            per_job_dir=Path(per_job) if per_job else None,
        )  # fmt: skip


def history_files(settings: Any) -> list[Path]:
    """STARTD_HISTORY and its rotated files that exist, newest first ([] when off)."""
    path = HistoryConfig.from_settings(settings).path
    if path is None:
        return []
    current = [path] if path.is_file() else []
    return current + sorted(rotated_files(path), reverse=True)


def rotated_files(path: Path) -> list[Path]:
    """`<path>.<YYYYMMDDTHHMMSS>` beside `path` (HTCondor's IsHistoryFilename)."""
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    prefix = path.name + "."
    return [path.parent / n for n in names
            if n.startswith(prefix) and BACKUP_SUFFIX.match(n[len(prefix):])]  # fmt: skip


def ad_text(ad: Mapping[str, str], with_environment: bool = True, fast_sort: bool = True,
            ) -> str:  # fmt: skip
    """The record's ad: `ad` maps names to old-syntax expression text (a WireAd). The
    history file's order is FastSort's (length, then name without case); a per-job
    file's is HumanSort's (the names' bytes)."""
    names = [n for n in ad if not is_private(n) and ATTRIBUTE_NAME.fullmatch(n)
             and (with_environment or n.lower() not in ENVIRONMENT_ATTRS)]  # fmt: skip
    names.sort(key=(lambda n: (len(n), n.lower())) if fast_sort else None)
    return "".join(f"{n} = {ad[n].translate(LINE_BREAKS)}\n" for n in names)


def _int_of(ad: Mapping[str, str], name: str) -> int:
    try:
        return int(ad.get(name, "-1"))
    except ValueError:
        return -1


def banner(ad: Mapping[str, str], offset: int, now: int) -> str:
    owner = ad.get("Owner", "")
    quoted = len(owner) >= 2 and owner[0] == owner[-1] == '"'
    owner = owner[1:-1].translate(LINE_BREAKS) if quoted else "?"
    return (f"*** Offset = {offset} ClusterId = {_int_of(ad, 'ClusterId')} "
            f"ProcId = {_int_of(ad, 'ProcId')} Owner = \"{owner}\" "
            f"CompletionDate = {_int_of(ad, 'CompletionDate')} CurrentTime = {now}\n")  # fmt: skip


def last_line_offset(fd: int) -> int:
    """Where the file's last line starts, read backwards as HTCondor's findHistoryOffset
    reads it (so the banners' Offsets are the same): 0 for an empty file, -1 where its
    fixed-size read comes up short (a file under 200 bytes)."""
    size = os.fstat(fd).st_size
    if size == 0:
        return 0
    position = size - 1 if size > 1 else size  # the last newline is not looked at
    while True:
        position = max(0, position - OFFSET_JUMP)
        chunk = os.pread(fd, OFFSET_JUMP, position)
        if len(chunk) < OFFSET_JUMP:
            return -1
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return position + newline + 1
        if position == 0:
            return 0


def maybe_rotate(config: HistoryConfig, path: Path, appending: int, now: float) -> None:
    """Rotate the file before `appending` more bytes, as MaybeRotateHistory decides; a
    rotation that fails is logged, and the file grows on."""
    try:
        _rotate_if_due(config, path, appending, now)
    except OSError as exc:
        logger.error("startd_history_not_rotated", file=str(path),
                     error=f"{exc.strerror or exc}", why="the file may get very large")  # fmt: skip


def _rotate_if_due(config: HistoryConfig, path: Path, appending: int, now: float) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    must = info.st_size + appending > config.max_bytes
    changed, today = time.localtime(info.st_mtime), time.localtime(now)
    if config.daily and (today.tm_yday > changed.tm_yday or today.tm_year > changed.tm_year):
        must = True
    if config.monthly and (today.tm_mon > changed.tm_mon or today.tm_year > changed.tm_year):
        must = True
    if not must:
        return
    backups = sorted(rotated_files(path))  # oldest first: the names sort as their times
    while backups and len(backups) >= config.rotations:
        oldest = backups.pop(0)
        oldest.unlink(missing_ok=True)
        logger.info("startd_history_backup_removed", file=str(oldest))
    rotated = path.with_name(f"{path.name}.{time.strftime('%Y%m%dT%H%M%S', today)}")
    os.replace(path, rotated)
    logger.info("startd_history_rotated", file=str(path), to=str(rotated))


def write_all(fd: int, data: bytes) -> None:
    """All of `data`, or OSError (a short write, a full disk, is no success)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"wrote {len(data) - len(view)} of {len(data)} bytes")
        view = view[written:]


def append_record(config: HistoryConfig, ad: Mapping[str, str], now: float | None = None,
                  ) -> None:  # fmt: skip
    """Append one record to STARTD_HISTORY (OSError when it cannot)."""
    if config.path is None:
        return
    now = time.time() if now is None else now
    text = ad_text(ad, config.with_environment)
    if config.rotation:
        maybe_rotate(config, config.path, len(text.encode()), now)
    fd = os.open(config.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        write_all(fd, (text + banner(ad, last_line_offset(fd), int(now))).encode())
    finally:
        os.close(fd)


def write_per_job_file(directory: Path, ad: Mapping[str, str], text: str) -> None:
    """history.<GlobalJobId>, never seen half written (a fresh temporary file renamed);
    OSError when it cannot be written."""
    if "ClusterId" not in ad or "ProcId" not in ad:
        logger.error("per_job_history_not_written", directory=str(directory),
                     why="no ClusterId or ProcId in the job's ad")  # fmt: skip
        return
    gjid = ad.get("GlobalJobId", '""').strip('"')
    if "/" in gjid or "\0" in gjid:
        logger.error("per_job_history_not_written", directory=str(directory),
                     why=f"GlobalJobId {gjid!r} is no file name")  # fmt: skip
        return
    fd, temporary = tempfile.mkstemp(prefix=".history.", suffix=".tmp", dir=directory)
    try:
        try:
            os.fchmod(fd, 0o644)
            write_all(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(temporary, directory / f"history.{gjid}")
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class StartdHistory:
    """The daemon's history writer: the knobs as they are now (a reload changes them)."""

    def __init__(self, settings: Callable[[], Any]) -> None:
        self.settings = settings  # the daemon's current settings

    def record(self, ad: Mapping[str, str], job: str) -> bool:
        """Append `job`'s record; False (and the error logged) when STARTD_HISTORY did
        not get it whole. The per-job file's failure is logged on its own."""
        config = HistoryConfig.from_settings(self.settings())
        if config.path is None and config.per_job_dir is None:
            return True
        if config.per_job_dir is not None and not config.per_job_dir.is_dir():
            logger.error("per_job_history_not_written", directory=str(config.per_job_dir),
                         why="STARTD_PER_JOB_HISTORY_DIR is not a directory")  # fmt: skip
            config = dataclasses.replace(config, per_job_dir=None)
        written = True
        try:
            append_record(config, ad)
        except OSError as exc:
            logger.error("startd_history_not_written", job=job, file=str(config.path),
                         error=f"{exc.strerror or exc}")  # fmt: skip
            written = False
        else:
            if config.path is not None:
                logger.debug("startd_history_written", job=job, file=str(config.path))
        if config.per_job_dir is not None:  # on its own, as WritePerJobHistoryFile
            try:
                write_per_job_file(config.per_job_dir, ad,
                                   ad_text(ad, config.with_environment, fast_sort=False))
            except OSError as exc:
                logger.error("per_job_history_not_written", job=job,
                             directory=str(config.per_job_dir),
                             error=f"{exc.strerror or exc}")  # fmt: skip
        return written
