"""The state store's schema: its tables, its version, and the migrations from older ones.

The tables of execd/daemon/store.py's SQLite file, as SQL: a new file gets them all, an
older execd's file (a lower version in its meta table) gets what it lacks from
MIGRATIONS, one version at a time; Store checks the version when it opens the file.
"""

from __future__ import annotations

# 6: jobs.preemption_badput. 5: claims.preempting. 4: jobs.vacate_reason. 3: claims.renewed.
# 2: jobs.evicting. The broken table came later without a new version: CREATE TABLE IF NOT
# EXISTS adds it to an older file, and an older execd ignores it.
SCHEMA_VERSION = 6
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims (
    session_id TEXT PRIMARY KEY,      -- the public part of the claim id
    claim_id TEXT NOT NULL,           -- the whole claim id: a secret
    slot TEXT NOT NULL,
    parent TEXT,                      -- the p-slot a d-slot was carved from
    carved TEXT,                      -- JSON: the d-slot's resources, to carve it again
    request_ad TEXT NOT NULL,         -- JSON
    lease_duration REAL NOT NULL,
    granted REAL NOT NULL,            -- wall time
    renewed REAL,                     -- wall time of the last ALIVE; NULL: none yet
    preempting INTEGER NOT NULL DEFAULT 0  -- 1: a preempting claim waiting for the slot
);
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY,
    slot TEXT NOT NULL,
    session_id TEXT NOT NULL,         -- the claim it runs on
    ad TEXT NOT NULL,                 -- JSON
    spec TEXT NOT NULL,               -- JSON: the starter's spec (report path, cgroup ...)
    starter_pid INTEGER NOT NULL,
    starter_start INTEGER NOT NULL,   -- /proc/<pid>/stat starttime: defeats pid reuse
    cgroup TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    started REAL NOT NULL,            -- wall time
    finished REAL,                    -- wall time; NULL while it runs
    report TEXT,                      -- JSON: the starter's report
    hold_reason TEXT,
    suspended TEXT,                   -- NULL, or who suspended it: 'policy' or 'command'
    evicting TEXT,                    -- NULL, or 'vacating' / 'killing': being evicted
    vacate_reason TEXT,               -- JSON [reason, code, subcode] for its shadow; NULL: none
    preemption_badput INTEGER NOT NULL DEFAULT 0  -- 1: its claim's BadputCausedByPreemption
);
CREATE TABLE IF NOT EXISTS broken (
    slot TEXT PRIMARY KEY,
    reason TEXT NOT NULL,             -- SlotBrokenReason
    carved TEXT                       -- JSON: a d-slot's resources, kept out of its p-slot
);
CREATE TABLE IF NOT EXISTS pool_claims (  -- pool mode: what a restart needs to go on
    session_id TEXT PRIMARY KEY,      -- the claim's (claims.session_id)
    schedd TEXT NOT NULL,             -- where its ALIVEs go
    lease INTEGER NOT NULL,           -- the claim's lease, seconds
    conversation TEXT,                -- JSON: the running job's shadow conversation
    connection TEXT                   -- JSON: its connection, handed over (a secret)
);
CREATE TABLE IF NOT EXISTS drain (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    how TEXT NOT NULL,
    reason TEXT NOT NULL,
    resume INTEGER NOT NULL
);
"""


# From schema N to N+1 (the added columns read NULL or 0: not evicting, no ALIVE
# recorded, no vacate reason, the slot's own claim, no preemption's badput). To 5: of two
# claims of one slot, the one whose session has no job while the other's has is the
# waiting preempting claim (a waiting claim has run nothing yet); with no job on either,
# the later grant is.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE jobs ADD COLUMN evicting TEXT",),
    2: ("ALTER TABLE claims ADD COLUMN renewed REAL",),
    3: ("ALTER TABLE jobs ADD COLUMN vacate_reason TEXT",),
    4: ("ALTER TABLE claims ADD COLUMN preempting INTEGER NOT NULL DEFAULT 0",
        "UPDATE claims SET preempting=1 WHERE session_id NOT IN (SELECT session_id FROM jobs)"
        " AND slot IN (SELECT c.slot FROM claims c JOIN jobs j ON j.session_id=c.session_id)"),
    5: ("ALTER TABLE jobs ADD COLUMN preemption_badput INTEGER NOT NULL DEFAULT 0",),
}
