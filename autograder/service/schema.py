"""The grading service's SQLite file: its tables, how it is opened, and how a file of an older
version is brought up to date (a course that updates keeps its queue and its students' checks)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

WAL_BYTES = 4 * 2**20
"""The size the write-ahead log is cut back to after a checkpoint."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    user TEXT NOT NULL,
    assignment TEXT NOT NULL,
    filename TEXT NOT NULL,
    notebook TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL DEFAULT 0,
    submitted REAL NOT NULL,
    started REAL,
    finished REAL,
    state TEXT NOT NULL,
    round INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    score REAL,
    max_score REAL,
    result TEXT,
    message TEXT NOT NULL DEFAULT '',
    content BLOB,
    queued_since REAL,
    queued_wait REAL NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS requests_by_state ON requests (state, round, seq);
CREATE TABLE IF NOT EXISTS served (id INTEGER PRIMARY KEY CHECK (id = 0), round INTEGER NOT NULL);
INSERT OR IGNORE INTO served VALUES (0, 0);
CREATE INDEX IF NOT EXISTS requests_by_user ON requests (user, assignment, submitted);
"""

ADDED_COLUMNS = {"queued_since": "REAL", "queued_wait": "REAL NOT NULL DEFAULT 0"}
"""Columns that a store file of an older version lacks, added when it is opened."""


def connect(path: Path) -> sqlite3.Connection:
    """The file at ``path``, in write-ahead-log mode, with every table and column of this version."""
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA busy_timeout=30000")
    db.execute(f"PRAGMA journal_size_limit={WAL_BYTES}")
    db.executescript(SCHEMA)
    have = {row[1] for row in db.execute("PRAGMA table_info(requests)")}
    for name, kind in ADDED_COLUMNS.items():
        if name not in have:
            db.execute(f"ALTER TABLE requests ADD COLUMN {name} {kind}")
            if name == "queued_since":  # a request waiting in the file has waited since it was sent
                db.execute("UPDATE requests SET queued_since = submitted WHERE state = 'queued'")
    return db
