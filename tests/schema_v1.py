"""Schema version 1, as trioplay wrote it before waits (issue 22): a test fixture.

The migrations of the SQLite and PostgreSQL stores up to version 1 (one
batch of CREATE statements), copied here, not imported, so that a migration
test opens a database made by that schema and not by today's code. ``{s}``
is the quoted PostgreSQL schema.
"""

from __future__ import annotations

SQLITE_V1: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            play TEXT NOT NULL,
            input_json TEXT NOT NULL,
            status TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            output_json TEXT,
            error TEXT,
            stats_json TEXT
        )""",
        "CREATE INDEX runs_by_update ON runs (updated_at)",
        """CREATE TABLE receipts (
            key TEXT PRIMARY KEY,
            operation TEXT NOT NULL,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            run_id TEXT,
            lease_id TEXT,
            lease_expires_at REAL,
            owner TEXT,
            attempts INTEGER NOT NULL,
            result_json TEXT,
            error_json TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            completed_at REAL
        )""",
        # Only run_id: an index on status would be rewritten by every completion.
        "CREATE INDEX receipts_by_run ON receipts (run_id)",
        """CREATE TABLE sheet_rows (
            run_id TEXT NOT NULL,
            dataset TEXT NOT NULL,
            key TEXT NOT NULL,
            position INTEGER NOT NULL,
            status TEXT NOT NULL,
            data_json TEXT NOT NULL,
            error TEXT,
            attempt INTEGER NOT NULL,
            PRIMARY KEY (run_id, dataset, key)
        )""",
        "CREATE INDEX sheet_rows_by_position ON sheet_rows (run_id, dataset, position)",
        """CREATE TABLE pages (
            run_id TEXT NOT NULL,
            dataset TEXT NOT NULL,
            page_offset INTEGER NOT NULL,
            status TEXT NOT NULL,
            lease_id TEXT,
            lease_expires_at REAL,
            owner TEXT,
            attempt INTEGER NOT NULL,
            failed INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (run_id, dataset, page_offset)
        )""",
    ),
)

POSTGRES_V1: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE {s}.runs (
            run_id text COLLATE "C" PRIMARY KEY,
            seq bigint GENERATED ALWAYS AS IDENTITY,
            play text NOT NULL,
            input_json bytea NOT NULL,
            status text NOT NULL,
            attempt integer NOT NULL,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            output_json bytea,
            error bytea,
            stats_json bytea
        )""",
        "CREATE INDEX runs_by_update ON {s}.runs (updated_at DESC, seq DESC)",
        """CREATE TABLE {s}.receipts (
            key text COLLATE "C" PRIMARY KEY,
            operation text NOT NULL,
            name text NOT NULL,
            status text NOT NULL,
            run_id text COLLATE "C",
            lease_id text,
            lease_expires_at double precision,
            owner text,
            attempts integer NOT NULL,
            result_json bytea,
            error_json bytea,
            created_at double precision NOT NULL,
            updated_at double precision NOT NULL,
            completed_at double precision
        )""",
        # Only run_id: an index on status would be rewritten by every completion.
        "CREATE INDEX receipts_by_run ON {s}.receipts (run_id)",
        """CREATE TABLE {s}.sheet_rows (
            run_id text COLLATE "C" NOT NULL,
            dataset text COLLATE "C" NOT NULL,
            key text COLLATE "C" NOT NULL,
            position bigint NOT NULL,
            status text NOT NULL,
            data_json bytea NOT NULL,
            error bytea,
            attempt integer NOT NULL,
            PRIMARY KEY (run_id, dataset, key)
        )""",
        "CREATE INDEX sheet_rows_by_position ON {s}.sheet_rows (run_id, dataset, position)",
        """CREATE TABLE {s}.pages (
            run_id text COLLATE "C" NOT NULL,
            dataset text COLLATE "C" NOT NULL,
            page_offset bigint NOT NULL,
            status text NOT NULL,
            lease_id text,
            lease_expires_at double precision,
            owner text,
            attempt integer NOT NULL,
            failed integer NOT NULL,
            updated_at double precision NOT NULL,
            PRIMARY KEY (run_id, dataset, page_offset)
        )""",
    ),
)
