"""The durable state of the daemon: SQLite (stdlib sqlite3, WAL) under SPOOL.

What a new daemon needs after `kill -9`, a crash or a restart in place (USR2) to carry
on where the old one stopped: the claims (slot, claim id, lease, for a d-slot the
resources carved for it, and whether it is a preempting claim still waiting for the
slot), the running jobs (starter pid and start time — together they name one process
even after the pid is reused —, cgroup, sandbox, job ad, and once it is being evicted
how and why, which its shadow is told), the drain request, the broken slots (what
could not be killed outlives any daemon), and the outcome of each finished job until
its claim holder has taken it. The tables and their migrations: store_schema.py.

Every method that changes something commits before it returns, and the daemon calls
it before it acknowledges the command that caused the change: an acknowledged claim
or job survives any crash that follows. The file holds claim ids, which are secrets:
it is created 0600 inside SPOOL (0700), and nothing here logs a claim id's secret.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from execd.daemon.store_schema import MIGRATIONS, SCHEMA, SCHEMA_VERSION
from execd.errors import ExecdError
from execd.slots.layout import Assigned
from execd.slots.partitionable import DynamicSlot

# meta key marking a job whose STARTD_HISTORY record is written (gone with the job)
HISTORY_MARK = "history_written:"


class StoreError(ExecdError):
    """The state store cannot be opened or written."""


@dataclass(frozen=True)
class ClaimRecord:
    session_id: str
    claim_id: str = ""  # secret: not in repr
    slot: str = ""
    parent: str | None = None
    carved: dict[str, Any] | None = None
    request_ad: dict[str, Any] | None = None
    lease_duration: float = 0.0
    granted: float = 0.0
    renewed: float | None = None  # wall time of the last ALIVE (None: none since granted)
    # a preempting claim still waiting for its slot's job to go (not the slot's claim);
    # False once it took the slot
    preempting: bool = False

    @property
    def last_renewed(self) -> float:
        """Wall time the claim's lease runs from: its last ALIVE, else its grant."""
        return self.granted if self.renewed is None else self.renewed

    def __repr__(self) -> str:
        return f"ClaimRecord({self.session_id!r}, slot={self.slot!r})"


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    slot: str
    session_id: str
    ad: dict[str, Any]
    spec: dict[str, Any]
    starter_pid: int
    starter_start: int
    cgroup: str
    sandbox: str
    started: float
    finished: float | None = None
    report: dict[str, Any] | None = None
    hold_reason: str | None = None
    suspended: str | None = None
    evicting: str | None = None  # 'vacating' or 'killing': a restart goes on evicting it
    # why the startd evicts it (reason, code, subcode): its shadow's 004 says so, also
    # when a restarted daemon reports the exit
    vacate_reason: tuple[str, int, int] | None = None
    # its claim's BadputCausedByPreemption as the policy decided it (eviction, end): a
    # restarted daemon's resumed eviction does not decide it again
    preemption_badput: bool = False


@dataclass(frozen=True)
class PoolClaimRecord:
    session_id: str
    schedd: str
    lease_s: int
    conversation: dict[str, Any] | None = None
    connection: dict[str, Any] | None = field(default=None, repr=False)  # a secret


def carved_json(carved: DynamicSlot) -> dict[str, Any]:
    """A d-slot's resources as the store keeps them (to carve the same slot again)."""
    return {"parent_id": carved.parent_id, "sub_id": carved.sub_id, "cpus": carved.cpus,
            "memory_mb": carved.memory_mb, "disk_kb": carved.disk_kb,
            "custom": {n: [a.amount, list(a.ids)] for n, a in carved.custom.items()}}


def dynamic_slot(carved: dict[str, Any]) -> DynamicSlot:
    """The inverse of carved_json."""
    custom = {n: Assigned(float(v[0]), tuple(v[1])) for n, v in carved.get("custom", {}).items()}
    return DynamicSlot(int(carved["parent_id"]), int(carved["sub_id"]), float(carved["cpus"]),
                       int(carved["memory_mb"]), int(carved["disk_kb"]), custom)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _vacate_reason(text: str | None) -> tuple[str, int, int] | None:
    """A stored vacate reason back as (reason, code, subcode)."""
    if text is None:
        return None
    reason, code, subcode = json.loads(text)
    return str(reason), int(code), int(subcode)


class Store:
    """One SQLite database; every write is one transaction, committed before returning."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            os.close(fd)
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit is in the WAL file (the OS has it) when it
            # returns, so it survives any death of the daemon. Only a power loss can take
            # the last commits — and a power loss ends every job on the node too. FULL
            # would fsync each commit: 4 ms here against 0.2 ms, three commits per job.
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA busy_timeout=5000")
            self.db.executescript(SCHEMA)
            self._check_version()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the state store {path}: {exc}") from None

    def _check_version(self) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif int(row[0]) in MIGRATIONS:  # an older execd's file: add what it lacks
            with self._tx():
                for version in range(int(row[0]), SCHEMA_VERSION):
                    for statement in MIGRATIONS[version]:
                        self.db.execute(statement)
                self.db.execute("UPDATE meta SET value=? WHERE key='schema'",
                                (str(SCHEMA_VERSION),))
        elif int(row[0]) != SCHEMA_VERSION:
            raise StoreError(f"state store {self.path} has schema {row[0]}, "
                             f"execd knows {SCHEMA_VERSION}")

    def _tx(self) -> _Transaction:
        return _Transaction(self.db, self.path)

    def close(self) -> None:
        self.db.close()

    # -- claims ---------------------------------------------------------------------
    def add_claim(self, claim: ClaimRecord) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO claims (session_id, claim_id, slot, parent, carved,"
                " request_ad, lease_duration, granted, renewed, preempting)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                (claim.session_id, claim.claim_id, claim.slot, claim.parent,
                 _json(claim.carved), _json(claim.request_ad or {}), claim.lease_duration,
                 claim.granted, claim.renewed, int(claim.preempting)))

    def renew_claim(self, session_id: str, wall: float) -> None:
        """An ALIVE renewed the claim's lease: a restarted daemon counts it from here."""
        with self._tx():
            self.db.execute("UPDATE claims SET renewed=? WHERE session_id=?",
                            (wall, session_id))

    def claim_took_slot(self, session_id: str, wall: float) -> None:
        """A waiting preempting claim became its slot's claim; its lease runs from now."""
        with self._tx():
            self.db.execute("UPDATE claims SET renewed=?, preempting=0 WHERE session_id=?",
                            (wall, session_id))

    def remove_claim(self, session_id: str) -> None:
        """The claim is gone, and with it the finished jobs its holder did not take."""
        with self._tx():
            self.db.execute("DELETE FROM claims WHERE session_id=?", (session_id,))
            self.db.execute("DELETE FROM jobs WHERE session_id=? AND finished IS NOT NULL",
                            (session_id,))

    def claims(self) -> list[ClaimRecord]:
        rows = self.db.execute(
            "SELECT session_id, claim_id, slot, parent, carved, request_ad, lease_duration,"
            " granted, renewed, preempting FROM claims ORDER BY granted").fetchall()
        return [ClaimRecord(r[0], r[1], r[2], r[3], _load(r[4]), _load(r[5]), r[6], r[7], r[8],
                            bool(r[9])) for r in rows]

    # -- jobs -----------------------------------------------------------------------
    def sequence(self, name: str) -> int:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def add_job(self, job: JobRecord, sequence: tuple[str, int] | None = None) -> None:
        """Record a running job (and, in the same transaction, the counter its id used)."""
        with self._tx():
            if sequence is not None:
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                (sequence[0], str(sequence[1])))
            self.db.execute(
                "INSERT OR REPLACE INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (job.job_id, job.slot, job.session_id, _json(job.ad), _json(job.spec),
                 job.starter_pid, job.starter_start, job.cgroup, job.sandbox, job.started,
                 job.finished, _json(job.report), job.hold_reason, job.suspended,
                 job.evicting, _json(job.vacate_reason), int(job.preemption_badput)))

    def set_suspended(self, job_id: str, by: str | None) -> None:
        with self._tx():
            self.db.execute("UPDATE jobs SET suspended=? WHERE job_id=?", (by, job_id))

    def set_evicting(self, job_id: str, how: str,
                     vacate_reason: tuple[str, int, int] | None = None,
                     preemption_badput: bool = False) -> None:
        """The job is being evicted (`how`), why, for its shadow (None: no reason), and
        whether its claim's policy called it a preemption's badput."""
        with self._tx():
            self.db.execute("UPDATE jobs SET evicting=?, vacate_reason=?, preemption_badput=?"
                            " WHERE job_id=?",
                            (how, _json(vacate_reason), int(preemption_badput), job_id))

    def finish_job(self, job_id: str, finished: float, report: dict[str, Any],
                   hold_reason: str | None, preemption_badput: bool = False) -> None:
        with self._tx():
            self.db.execute(
                "UPDATE jobs SET finished=?, report=?, hold_reason=?, preemption_badput=?"
                " WHERE job_id=?",
                (finished, _json(report), hold_reason, int(preemption_badput), job_id))

    def remove_job(self, job_id: str) -> None:
        with self._tx():
            self.db.execute("DELETE FROM jobs WHERE job_id=?", (job_id,))
            self.db.execute("DELETE FROM meta WHERE key=?", (HISTORY_MARK + job_id,))

    def mark_history_written(self, job_id: str) -> None:
        """The job's STARTD_HISTORY record is written (a restart must not write it again)."""
        self.set_meta(HISTORY_MARK + job_id, "1")

    def history_written(self, job_id: str) -> bool:
        return self.meta(HISTORY_MARK + job_id) is not None

    def jobs(self) -> list[JobRecord]:
        rows = self.db.execute("SELECT * FROM jobs ORDER BY started").fetchall()
        return [JobRecord(r[0], r[1], r[2], _load(r[3]), _load(r[4]), r[5], r[6], r[7], r[8],
                          r[9], r[10], _load(r[11]), r[12], r[13], r[14], _vacate_reason(r[15]),
                          bool(r[16]))
                for r in rows]

    # -- broken slots -----------------------------------------------------------------
    def set_broken(self, slot: str, reason: str, carved: dict[str, Any] | None) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO broken VALUES (?, ?, ?)",
                            (slot, reason, _json(carved)))

    def remove_broken(self, slot: str) -> None:
        with self._tx():
            self.db.execute("DELETE FROM broken WHERE slot=?", (slot,))

    def broken(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        rows = self.db.execute("SELECT slot, reason, carved FROM broken ORDER BY slot")
        return [(str(r[0]), str(r[1]), _load(r[2])) for r in rows.fetchall()]

    # -- pool mode ------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def set_pool_claim(self, session_id: str, schedd: str, lease_s: int) -> None:
        """A claim made through the pool: its schedd and lease (its conversation kept)."""
        with self._tx():
            self.db.execute(
                "INSERT INTO pool_claims VALUES (?, ?, ?, NULL, NULL) ON CONFLICT(session_id) "
                "DO UPDATE SET schedd=excluded.schedd, lease=excluded.lease",
                (session_id, schedd, lease_s))

    def set_conversation(self, session_id: str, state: dict[str, Any] | None) -> None:
        with self._tx():
            self.db.execute("UPDATE pool_claims SET conversation=? WHERE session_id=?",
                            (_json(state), session_id))

    def set_connection(self, session_id: str, record: dict[str, Any] | None) -> None:
        with self._tx():
            self.db.execute("UPDATE pool_claims SET connection=? WHERE session_id=?",
                            (_json(record), session_id))

    def remove_pool_claim(self, session_id: str) -> None:
        with self._tx():
            self.db.execute("DELETE FROM pool_claims WHERE session_id=?", (session_id,))

    def pool_claims(self) -> list[PoolClaimRecord]:
        """Every claim made through the pool."""
        rows = self.db.execute("SELECT * FROM pool_claims ORDER BY session_id").fetchall()
        return [PoolClaimRecord(str(r[0]), str(r[1]), int(r[2]), _load(r[3]), _load(r[4]))
                for r in rows]

    # -- drain ----------------------------------------------------------------------
    def set_drain(self, how: str, reason: str, resume: bool) -> None:
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO drain VALUES (1, ?, ?, ?)",
                            (how, reason, int(resume)))

    def clear_drain(self) -> None:
        with self._tx():
            self.db.execute("DELETE FROM drain")

    def drain(self) -> tuple[str, str, bool] | None:
        row = self.db.execute("SELECT how, reason, resume FROM drain").fetchone()
        return None if row is None else (str(row[0]), str(row[1]), bool(row[2]))


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on error; sqlite errors become StoreError."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db, self.path = db, path

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, exc: BaseException | None, _tb: object) -> None:
        if exc is None:
            try:
                self.db.execute("COMMIT")
            except sqlite3.Error as error:
                self.db.execute("ROLLBACK")
                raise StoreError(f"cannot write the state store {self.path}: {error}") from None
            return
        self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"cannot write the state store {self.path}: {exc}") from None
