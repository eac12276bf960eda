"""The PostgreSQL store's schema and statements, each written once per schema name.

:class:`Sql` builds every statement for one schema at construction; the
jobs that run them live in :mod:`trioplay.stores._pg_jobs`.
"""

from __future__ import annotations

from ._columns import (
    EVENT_COLUMNS,
    PAGE_COLUMNS,
    RECEIPT_COLUMNS,
    RECEIPT_FIELDS,
    RUN_COLUMNS,
    SHEET_COLUMNS,
    WAIT_COLUMNS,
)

SCHEMA_VERSION = 2

# Each migration is a list of statements; "{s}" is the quoted schema name.
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
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
        ) WITH (fillfactor = 50)""",
        # Half of each page is left free so that a receipt's completion (its
        # one update, a row a little longer than its claim's) fits on the
        # claim's page: a HOT update, which writes no index entry and less
        # WAL (the server's CPU per completion of 46 keys -33%:
        # docs/benchmarks.md, "PostgreSQL batches as jsonb"). A schema made
        # before this keeps 100; `ALTER TABLE receipts SET (fillfactor = 50)`
        # gives it the same for the pages written after.
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
    # 2: waits and events (issue 22); runs know their parent, root, depth and play.
    (
        """ALTER TABLE {s}.runs ADD COLUMN parent_run_id text COLLATE "C",
            ADD COLUMN root_run_id text COLLATE "C",
            ADD COLUMN depth integer NOT NULL DEFAULT 0,
            ADD COLUMN play_ref text""",
        "UPDATE {s}.runs SET root_run_id = run_id",
        """CREATE TABLE {s}.waits (
            wait_key text COLLATE "C" PRIMARY KEY,
            run_id text COLLATE "C" NOT NULL,
            dataset text COLLATE "C",
            row_key text COLLATE "C",
            name text COLLATE "C" NOT NULL,
            key_json text COLLATE "C" NOT NULL,
            token text COLLATE "C" NOT NULL UNIQUE,
            deadline double precision NOT NULL,
            status text NOT NULL,
            created_at double precision NOT NULL,
            settled_at double precision,
            payload_json bytea,
            reason bytea,
            event_id text COLLATE "C"
        )""",
        "CREATE INDEX waits_open ON {s}.waits (run_id, name, key_json) WHERE status = 'waiting'",
        "CREATE INDEX waits_by_run ON {s}.waits (run_id, created_at, wait_key)",
        # seq is the send order within a (run, name, key): its senders hold one lock.
        """CREATE TABLE {s}.events (
            event_id text COLLATE "C" NOT NULL,
            run_id text COLLATE "C" NOT NULL,
            name text COLLATE "C" NOT NULL,
            key_json text COLLATE "C" NOT NULL,
            payload_json bytea,
            reject bytea,
            sent_at double precision NOT NULL,
            consumed_by text COLLATE "C",
            seq bigint GENERATED ALWAYS AS IDENTITY,
            PRIMARY KEY (run_id, event_id)
        )""",
        "CREATE INDEX events_unclaimed ON {s}.events (run_id, seq) WHERE consumed_by IS NULL",
    ),
)

_WAIT_TYPES = (
    "text, text, text, text, text, text, text, float8, text, float8, float8, bytea, bytea, text"
)

_RECEIPT_TYPES = (
    "text, text, text, text, text, text, float8, text, int4, bytea, bytea, float8, float8, float8"
)
# Rows of a sheet batch are copied into this per-connection table, then upserted.
_INCOMING = "trioplay_incoming_rows"
CREATE_INCOMING = (
    f'CREATE TEMP TABLE {_INCOMING} (key text COLLATE "C", position bigint,'
    " status text, data_json bytea, error bytea, attempt integer)"
    " ON COMMIT DELETE ROWS"
)


def _arrays(types: str) -> str:
    return ", ".join(f"%b::{t.strip()}[]" for t in types.split(","))


def _json_rows(types: str) -> str:
    """``SELECT`` the rows of one ``jsonb`` parameter, an array of rows, as columns of ``types``.

    A hot batch (claims, fenced writes) travels as this one parameter, its
    rows dumped by ``json.dumps`` in C, rather than as one array per column,
    which psycopg dumps element by element in Python (half of a claim's
    client CPU at 46 keys: docs/benchmarks.md, "PostgreSQL batches as
    jsonb"). Payloads travel as text and are stored as their UTF-8 bytes.
    """
    columns = ", ".join(
        f"convert_to(e->>{i}, 'UTF8')" if t.strip() == "bytea" else f"(e->>{i})::{t.strip()}"
        for i, t in enumerate(types.split(","))
    )
    return f"SELECT {columns} FROM jsonb_array_elements(%s::jsonb) AS e"


class Sql:
    """Every statement of the store, written once for one schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        s = self.s = '"' + schema + '"'
        self.migrations = [[stmt.format(s=s) for stmt in batch] for batch in _MIGRATIONS]

        self.begin_attempt = f"""
            INSERT INTO {s}.runs AS r
                (run_id, play, input_json, status, attempt, created_at, updated_at,
                 parent_run_id, root_run_id, depth, play_ref)
            VALUES (%s, %s, %s, 'running', 1, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (run_id) DO UPDATE SET
                status = 'running', attempt = r.attempt + 1, updated_at = excluded.updated_at,
                output_json = NULL, error = NULL, stats_json = NULL,
                play_ref = coalesce(excluded.play_ref, r.play_ref)
            WHERE r.play = excluded.play AND r.input_json = excluded.input_json
                AND r.status <> 'cancelled'
            RETURNING {RUN_COLUMNS}
        """
        # No row from begin_attempt: the run has another play or input, or was
        # cancelled (read it as it is).
        # Fenced by the attempt: a late attempt never overwrites a later one's end.
        self.finish_attempt = f"""
            UPDATE {s}.runs SET status = %s, updated_at = %s, output_json = %s, error = %s,
                stats_json = %s
            WHERE run_id = %s AND attempt = %s
        """
        self.run_exists = f"SELECT 1 FROM {s}.runs WHERE run_id = %s"
        self.get_run = f"SELECT {RUN_COLUMNS} FROM {s}.runs WHERE run_id = %s"
        self.cancel_run = (
            f"UPDATE {s}.runs SET status = 'cancelled', updated_at = %s WHERE run_id = %s"
        )
        self.run_status = f"SELECT status FROM {s}.runs WHERE run_id = %s"

        self.get_waits = f"SELECT {WAIT_COLUMNS} FROM {s}.waits WHERE wait_key = ANY(%b::text[])"
        self.wait_by_token = f"SELECT {WAIT_COLUMNS} FROM {s}.waits WHERE token = %s"
        self.open_waits = f"""
            SELECT {WAIT_COLUMNS} FROM {s}.waits
            WHERE run_id = %s AND name = %s AND key_json = %s AND status = 'waiting'
        """
        self.run_open_waits = (
            f"SELECT {WAIT_COLUMNS} FROM {s}.waits WHERE run_id = %s AND status = 'waiting'"
        )
        self.list_waits = (
            f"SELECT {WAIT_COLUMNS} FROM {s}.waits WHERE run_id = %s ORDER BY created_at, wait_key"
        )
        self.insert_waits = f"""
            INSERT INTO {s}.waits ({WAIT_COLUMNS}) SELECT * FROM unnest({_arrays(_WAIT_TYPES)})
        """
        # Settling is fenced by status: a wait settles once.
        self.settle_waits = f"""
            UPDATE {s}.waits AS w SET status = u.status, settled_at = u.settled_at,
                payload_json = u.payload_json, reason = u.reason, event_id = u.event_id
            FROM unnest(%b::text[], %b::text[], %b::float8[], %b::bytea[], %b::bytea[],
                %b::text[]) AS u(wait_key, status, settled_at, payload_json, reason, event_id)
            WHERE w.wait_key = u.wait_key AND w.status = 'waiting'
        """
        self.event_by_id = (
            f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE run_id = %s AND event_id = %s"
        )
        self.unclaimed_events = f"""
            SELECT {EVENT_COLUMNS} FROM {s}.events
            WHERE run_id = ANY(%b::text[]) AND consumed_by IS NULL ORDER BY seq
        """
        self.list_events = f"SELECT {EVENT_COLUMNS} FROM {s}.events WHERE run_id = %s ORDER BY seq"
        self.insert_event = f"""
            INSERT INTO {s}.events ({EVENT_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        """
        self.consume_events = f"""
            UPDATE {s}.events AS e SET consumed_by = u.wait_key
            FROM unnest(%b::text[], %b::text[], %b::text[]) AS u(run_id, event_id, wait_key)
            WHERE e.run_id = u.run_id AND e.event_id = u.event_id AND e.consumed_by IS NULL
        """
        self.list_runs = (
            f"SELECT {RUN_COLUMNS} FROM {s}.runs ORDER BY updated_at DESC, seq DESC LIMIT %s"
        )

        self.get_receipts = (
            f"SELECT {RECEIPT_COLUMNS} FROM {s}.receipts WHERE key = ANY(%b::text[])"
        )
        # In key order, so that two claimers lock overlapping keys in one order.
        self.lock_receipts = self.get_receipts + " ORDER BY key FOR UPDATE"
        # Keys we locked are updated; a key we saw absent but that another
        # transaction inserted since is left alone and not returned: the claim
        # is then retried on a fresh snapshot.
        updates = ", ".join(f"{c} = excluded.{c}" for c in RECEIPT_FIELDS[1:])
        self.upsert_claimed = f"""
            INSERT INTO {s}.receipts AS r ({RECEIPT_COLUMNS})
            {_json_rows(_RECEIPT_TYPES)}
            ON CONFLICT (key) DO UPDATE SET {updates}
            WHERE r.key = ANY(%b::text[])
            RETURNING r.key
        """
        # A batch of keys taken for new (see _pg_jobs.claim_many): the rows
        # of keys that have a receipt already are skipped, not returned.
        self.insert_new = f"""
            INSERT INTO {s}.receipts ({RECEIPT_COLUMNS})
            {_json_rows(_RECEIPT_TYPES)}
            ON CONFLICT (key) DO NOTHING
            RETURNING key
        """
        fenced = f"""
            UPDATE {s}.receipts AS r SET {{}}
            FROM unnest(%b::text[], %b::text[]{{}}) WITH ORDINALITY AS u(key, lease_id{{}}, i)
            WHERE r.key = u.key AND r.lease_id = u.lease_id AND r.status = 'running'
            RETURNING u.i
        """
        self.heartbeat = fenced.format("lease_expires_at = %s, updated_at = %s", "", "")
        self.complete = fenced.format(
            "status = 'completed', lease_expires_at = NULL, result_json = u.payload,"
            " error_json = NULL, updated_at = %s, completed_at = %s",
            ", %b::bytea[]",
            ", payload",
        )
        self.fail = fenced.format(
            "status = 'failed', lease_expires_at = NULL, result_json = NULL,"
            " error_json = u.payload, updated_at = %s, completed_at = %s",
            ", %b::bytea[]",
            ", payload",
        )
        self.release = fenced.format(
            "status = 'pending', lease_id = NULL, lease_expires_at = NULL, owner = NULL,"
            " updated_at = %s",
            "",
            "",
        )
        self.count_receipts = (
            f"SELECT status, count(*) FROM {s}.receipts WHERE run_id = %s GROUP BY status"
        )
        self.failed_receipts = (
            f"SELECT {RECEIPT_COLUMNS} FROM {s}.receipts"
            " WHERE run_id = %s AND status = 'failed' AND key > %s ORDER BY key LIMIT %s"
        )
        self.forget_failed = (
            f"UPDATE {s}.receipts SET status = 'pending', lease_id = NULL,"
            " lease_expires_at = NULL, owner = NULL, error_json = NULL, updated_at = %s"
            " WHERE key = ANY(%s::text[]) AND run_id = %s AND status = 'failed' RETURNING key"
        )

        self.copy_rows = f"COPY {_INCOMING} ({SHEET_COLUMNS}) FROM STDIN (FORMAT BINARY)"
        self.upsert_rows = f"""
            INSERT INTO {s}.sheet_rows AS t
                (run_id, dataset, key, position, status, data_json, error, attempt)
            SELECT %s, %s, key, position, status, data_json, error, attempt FROM {_INCOMING}
            ON CONFLICT (run_id, dataset, key) DO UPDATE SET
                position = excluded.position, status = excluded.status,
                data_json = excluded.data_json, error = excluded.error,
                attempt = excluded.attempt
            WHERE NOT (t.status = 'completed' AND excluded.status = 'failed')
        """
        # A fenced sheet write reads its pages' current leases, and holds them
        # (FOR SHARE) until it commits: a claim of one of those pages waits,
        # then plans against the rows written.
        self.lock_page_leases = f"""
            SELECT page_offset, lease_id FROM {s}.pages
            WHERE run_id = %s AND dataset = %s AND page_offset = ANY(%s::int8[])
            ORDER BY page_offset FOR SHARE
        """
        self.completed_keys = f"""
            SELECT key FROM {s}.sheet_rows
            WHERE run_id = %s AND dataset = %s AND status = 'completed' AND key = ANY(%s::text[])
        """
        self.run_leases = f"""
            SELECT run_id, max(lease_expires_at), max(updated_at) FROM (
                SELECT run_id, lease_expires_at, updated_at FROM {s}.receipts
                WHERE status = 'running' AND run_id = ANY(%s::text[])
                UNION ALL
                SELECT run_id, lease_expires_at, updated_at FROM {s}.pages
                WHERE status = 'running' AND run_id = ANY(%s::text[])
            ) AS leases GROUP BY run_id
        """
        self.sheet_status = f"""
            SELECT key, status, attempt FROM {s}.sheet_rows
            WHERE run_id = %s AND dataset = %s AND key = ANY(%b::text[])
        """
        read_rows = f"""
            SELECT {SHEET_COLUMNS} FROM {s}.sheet_rows
            WHERE run_id = %s AND dataset = %s AND position > %s{{}}
            ORDER BY position LIMIT %s
        """
        self.read_rows = read_rows.format("")
        self.read_rows_by_status = read_rows.format(" AND status = %s")
        self.count_rows = (
            f"SELECT status, count(*) FROM {s}.sheet_rows"
            " WHERE run_id = %s AND dataset = %s GROUP BY status"
        )
        self.list_datasets = (
            f"SELECT DISTINCT dataset FROM {s}.sheet_rows WHERE run_id = %s ORDER BY dataset"
        )

        self.new_page = f"""
            INSERT INTO {s}.pages
                (run_id, dataset, page_offset, status, attempt, failed, updated_at)
            VALUES (%s, %s, %s, 'pending', 0, 0, %s)
            ON CONFLICT DO NOTHING
        """
        self.lock_page = f"""
            SELECT {PAGE_COLUMNS} FROM {s}.pages
            WHERE run_id = %s AND dataset = %s AND page_offset = %s FOR UPDATE
        """
        self.claim_page = f"""
            UPDATE {s}.pages SET status = %s, lease_id = %s, lease_expires_at = %s,
                owner = %s, attempt = %s, failed = %s, updated_at = %s
            WHERE run_id = %s AND dataset = %s AND page_offset = %s
        """
        page_fenced = f"""
            UPDATE {s}.pages AS p SET {{}}
            FROM unnest(%b::text[], %b::text[], %b::int8[], %b::text[])
                WITH ORDINALITY AS u(run_id, dataset, page_offset, lease_id, i)
            WHERE p.run_id = u.run_id AND p.dataset = u.dataset
                AND p.page_offset = u.page_offset AND p.lease_id = u.lease_id
                AND p.status = 'running'
            RETURNING u.i
        """
        self.heartbeat_pages = page_fenced.format("lease_expires_at = %s, updated_at = %s")
        self.finish_page = page_fenced.format(
            "status = 'done', lease_expires_at = NULL, attempt = %s, failed = %s, updated_at = %s"
        )
        # The lease id stays until the next claim: rows the releasing process
        # still flushes are its own until another process claims the page.
        self.release_page = page_fenced.format(
            "status = 'pending', lease_expires_at = NULL, owner = NULL, updated_at = %s"
        )
