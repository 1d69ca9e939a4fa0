"""The witness state on SQL: one implementation of :class:`witness.state.WitnessState` for
every engine — a schema on the storage engine (:mod:`store.db`), on SQLite
(:mod:`witness.sqlite_state`) and PostgreSQL (:mod:`witness.pg_state`).

Transactions are the engine's (:mod:`store.db.engine`): every operation is one function run
by :meth:`store.db.Session.transact` in one transaction, retried as a whole when it may be,
with the commit-unknown rule; its failures are named here as the state's own errors
(:class:`BackendError`, :class:`CommitUnknownError`, under :class:`StateError`). None of them
is a MalformedError: the witness server maps them to 500, never to a client error. What the
state accepts (origins, keys, a swap's arguments) is :mod:`witness.statecheck`; the export
file of ``export_state``/``import_state`` is :mod:`witness.statefile`.

Schema (created idempotently when a handle opens; safe from several processes at once)::

    witness_meta (singleton=1, schema_version)
    logs         (origin PK, qpd NULL or > 0, disabled, tiles NULL or a URL)
    log_keys     (origin -> logs, vkey)                        PK (origin, vkey)
    latest       (origin PK -> logs, size, root, note, updated_at)
    evidence     (id PK, increasing, origin -> logs, reason, request, stored_note,
                  received_at)                                 index (origin, id)
    quota        (origin -> logs, day, count)                  PK (origin, day)

Origins and vkeys compare bytewise (SQLite BINARY, PostgreSQL ``COLLATE "C"``), so database
order is Python's ``str`` order. Every table but ``logs`` references ``logs``: a row for an
origin that is not configured cannot exist (UsageError "log X is not configured"). Nothing is
ever deleted: a log is disabled, never removed. Old ``quota`` rows (one per log and day) stay.

The compare-and-swap is ONE statement inside its transaction:

* expected None: ``INSERT INTO latest … ON CONFLICT (origin) DO NOTHING`` — True iff it
  inserted the row (two first checkpoints racing: the primary key picks one);
* otherwise: ``UPDATE latest SET … WHERE origin = ? AND size = ? AND root = ? AND updated_at
  <= ?`` (the new time) — True iff it changed the row. On PostgreSQL a racing UPDATE waits for
  the row lock and re-checks its WHERE clause against the committed row, so at most one of
  several swaps from one expected state to a larger size succeeds; on SQLite, BEGIN IMMEDIATE
  serialises them.

It is durable when it returns True: SQLite commits with WAL and ``synchronous=FULL`` (the
WAL is fsynced); PostgreSQL returned COMMIT.

Decisions where the contract leaves room (and :mod:`witness.statecheck`'s rules):

* ``add_log`` needs at least one key; repeated keys are kept once. ``LogConfig.keys`` is in
  bytewise order. ``add_key``/``set_disabled``/``set_qpd`` of an unknown origin: UsageError.
* ``compare_and_swap`` checks its arguments before touching the database
  (:func:`witness.statecheck.check_swap`). It does not look at ``disabled``: the server
  refuses a disabled log before it gets here. Re-storing the current (size, root) with a fresh
  note succeeds (a re-submitted checkpoint gets a new cosignature).
* ``evidence`` is ordered by ID, newest first: IDs increase in the order rows were inserted.
* ``count_request`` is one upsert-increment (``… ON CONFLICT DO UPDATE SET count = count + 1
  RETURNING count``): concurrent requests get distinct, dense counts.
* ``status`` (the status page) is one read transaction: the logs and keys, then one query that
  joins each log's ``latest`` row (size and time, not the note), its ``quota`` row of the day
  and its evidence count; ``evidence_summaries`` reads the lengths of the notes, not the notes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from store.db import MAX_ATTEMPTS, Dialect, Session, StoredValues, Tx, check_int, create_tables
from store.db import errors as engine
from tlog.errors import TlogError, UsageError
from witness.state import (
    Cosigned,
    Evidence,
    EvidenceSummary,
    LogConfig,
    LogStatus,
    WitnessState,
)
from witness.statecheck import (
    CONTROL,
    LOG_KEY_TYPES,
    MAX_ORIGIN_BYTES,
    MAX_REASON_CHARS,
    MAX_VKEY_BYTES,
    check_keys,
    check_log_vkey,
    check_origin,
    check_qpd,
    check_swap,
    check_tiles_url,
    could_be_configured,
)
from witness.statefile import STATE_HEADER, format_state, parse_state

T = TypeVar("T")

SCHEMA_VERSION = 3
"""Version of the schema, recorded in ``witness_meta``. A state of version 1 or 2 is upgraded
when opened (:data:`_UPGRADES`); a state of any other version is refused."""

MAX_EVIDENCE_PER_LOG = 64
"""Evidence rows kept per log: beyond, a proven split view is logged, not kept."""

MAX_EVIDENCE_BYTES_PER_LOG = 32 << 20
"""Bytes of evidence (request and stored note) kept per log: beyond, not kept."""

OWNER = "tlog-witness"
"""The schema's name for the engine's init lock."""


# --- errors -------------------------------------------------------------------------------------


class StateError(TlogError):
    """Root of the state's storage errors (never a MalformedError: a server answers 500)."""


class BackendError(StateError, engine.BackendError):
    """The database failed; the transaction was rolled back, nothing was written."""


class CommitUnknownError(StateError, engine.CommitUnknownError):
    """COMMIT was sent but no verdict came back: the write may or may not have landed.

    After a compare-and-swap, re-read :meth:`~witness.state.WitnessState.latest` before
    doing anything else, and never release a cosignature on the strength of it.
    """


class CorruptStateError(StateError):
    """A stored value has the wrong shape (a database edited by hand, or a bug)."""


class StateSession(Session):
    """The engine's session, raising the state's errors."""

    backend_error = BackendError
    commit_unknown_error = CommitUnknownError
    closed_message = "the witness state is closed"
    unknown_advice = "re-read before going on"


_STORED = StoredValues(CorruptStateError)


def _swap(tx: Tx, expected: Cosigned | None, new: Cosigned) -> bool:
    """The compare-and-swap statement: True iff it wrote the row."""
    values = (new.size, new.root, new.note, new.updated_at)
    if expected is None:
        with _of_configured(tx, new.origin):
            n = tx.execute(
                "INSERT INTO latest (origin, size, root, note, updated_at)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO NOTHING",
                (new.origin, *values),
            )
    else:
        n = tx.execute(
            "UPDATE latest SET size = ?, root = ?, note = ?, updated_at = ?"
            " WHERE origin = ? AND size = ? AND root = ? AND updated_at <= ?",
            (*values, new.origin, expected.size, expected.root, new.updated_at),
        )
    return n == 1


# --- the schema ---------------------------------------------------------------------------------

_DDL = (
    """CREATE TABLE IF NOT EXISTS witness_meta (
        singleton BIGINT NOT NULL PRIMARY KEY CHECK (singleton = 1),
        schema_version BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS logs (
        origin {key} NOT NULL PRIMARY KEY,
        qpd BIGINT CHECK (qpd IS NULL OR qpd > 0),
        disabled {bool} NOT NULL,
        tiles TEXT)""",
    """CREATE TABLE IF NOT EXISTS log_keys (
        origin {key} NOT NULL REFERENCES logs (origin),
        vkey {key} NOT NULL,
        PRIMARY KEY (origin, vkey))""",
    """CREATE TABLE IF NOT EXISTS latest (
        origin {key} NOT NULL PRIMARY KEY REFERENCES logs (origin),
        size BIGINT NOT NULL CHECK (size >= 0),
        root {blob} NOT NULL,
        note {blob} NOT NULL,
        updated_at BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS evidence (
        id {serial},
        origin {key} NOT NULL REFERENCES logs (origin),
        reason TEXT NOT NULL,
        request {blob} NOT NULL,
        stored_note {blob},
        received_at BIGINT NOT NULL,
        proves {blob})""",
    "CREATE INDEX IF NOT EXISTS evidence_by_origin ON evidence (origin, id)",
    "CREATE UNIQUE INDEX IF NOT EXISTS evidence_proves ON evidence (origin, proves)",
    """CREATE TABLE IF NOT EXISTS quota (
        origin {key} NOT NULL REFERENCES logs (origin),
        day BIGINT NOT NULL,
        count BIGINT NOT NULL,
        PRIMARY KEY (origin, day))""",
)


_UPGRADES: dict[int, tuple[str, ...]] = {
    # 1 -> 2: evidence names what it proves, once per log (rows of version 1 keep NULL, which
    # a unique index never compares equal).
    1: (
        "ALTER TABLE evidence ADD COLUMN proves {blob}",
        "CREATE UNIQUE INDEX IF NOT EXISTS evidence_proves ON evidence (origin, proves)",
    ),
    # 2 -> 3: a log may name the tiles URL that tlog-witness feed reads it from.
    2: ("ALTER TABLE logs ADD COLUMN tiles TEXT",),
}
"""Statements that take a state from version N to N + 1, run in one write transaction."""


def schema(types: dict[str, str]) -> list[str]:
    """The DDL statements with a dialect's column types substituted."""
    return [stmt.format(**types) for stmt in _DDL]


def _not_configured(origin: str) -> UsageError:
    return UsageError(f"log {origin} is not configured")


@contextlib.contextmanager
def _of_configured(tx: Tx, origin: str) -> Iterator[None]:
    """Around statements that write rows referencing ``logs``: a foreign-key violation means
    that ``origin`` is not configured (UsageError), any other driver error passes."""
    try:
        yield
    except tx.dialect.driver_errors as e:
        if tx.dialect.foreign_key(e):
            raise _not_configured(origin) from None
        raise


# --- the state ----------------------------------------------------------------------------------


class SQLState(WitnessState):
    """The witness state in one SQL database through a :class:`Dialect`.

    With ``create`` (the default) the schema is created if missing (idempotent, safe from
    several processes at once); without it the schema must exist (UsageError otherwise).
    A state written by another schema version is refused (UsageError).
    """

    def __init__(self, dialect: Dialect, *, create: bool = True, where: str = "") -> None:
        self._d = dialect
        self._where = where or dialect.name
        self._session = StateSession(dialect)
        try:
            version = self._session.transact(
                create, self._initialise if create else self._check_schema
            )
            if version != SCHEMA_VERSION:
                self._session.transact(True, self._upgrade)
        except BaseException:
            self._session.close()
            raise

    def _initialise(self, tx: Tx) -> int:
        create_tables(tx, OWNER, _DDL)
        tx.execute(
            "INSERT INTO witness_meta (singleton, schema_version) VALUES (1, ?)"
            " ON CONFLICT (singleton) DO NOTHING",
            (SCHEMA_VERSION,),
        )
        return self._check_schema(tx)

    def _upgrade(self, tx: Tx) -> None:
        """Bring an older state to :data:`SCHEMA_VERSION`, in one write transaction (a
        concurrent upgrader waits for the write lock, then finds nothing to do)."""
        version = self._check_schema(tx)
        while version < SCHEMA_VERSION:
            for stmt in _UPGRADES[version]:
                tx.execute(stmt.format(**tx.dialect.types))
            version += 1
        tx.execute("UPDATE witness_meta SET schema_version = ? WHERE singleton = 1", (version,))

    def _check_schema(self, tx: Tx) -> int:
        """The state's schema version: this code's, or one it upgrades (UsageError else)."""
        row = tx.one(tx.dialect.table_exists_sql("witness_meta"))
        missing = f"{self._where}: no witness state here (create it first)"
        if row is None or not row[0]:
            raise UsageError(missing)
        meta = tx.one("SELECT schema_version FROM witness_meta WHERE singleton = 1")
        if meta is None:
            raise UsageError(missing)
        if meta[0] != SCHEMA_VERSION and meta[0] not in _UPGRADES:
            raise UsageError(
                f"{self._where}: the witness state's schema version is {meta[0]!r}, this code"
                f" reads {SCHEMA_VERSION}"
            )
        return int(meta[0])

    def _write(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(True, fn)

    def _read(self, fn: Callable[[Tx], T]) -> T:
        return self._session.transact(False, fn)

    def close(self) -> None:
        self._session.close()

    # --- configuration -------------------------------------------------------------------------

    def add_log(
        self, origin: str, keys: tuple[str, ...], qpd: int | None = None, tiles: str | None = None
    ) -> None:
        """Follow a new log. Requires: a valid origin, at least one log vkey, qpd None or
        positive, tiles None or a tiles URL. An origin already configured (enabled or
        disabled) is a UsageError."""
        check_origin(origin)
        vkeys = check_keys(keys)
        qpd = check_qpd(qpd)
        url = None if tiles is None else check_tiles_url(tiles)

        def work(tx: Tx) -> None:
            if not tx.execute(
                "INSERT INTO logs (origin, qpd, disabled, tiles) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (origin) DO NOTHING",
                (origin, qpd, False, url),
            ):
                raise UsageError(
                    f"log {origin} is already configured (disabled logs are never deleted)"
                )
            tx.executemany(
                "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)", [(origin, k) for k in vkeys]
            )

        self._write(work)

    def add_key(self, origin: str, vkey: str) -> None:
        """Trust one more key for a configured log (UsageError if not configured). Idempotent."""
        check_origin(origin)
        check_log_vkey(vkey)

        def work(tx: Tx) -> None:
            with _of_configured(tx, origin):
                tx.execute(
                    "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)"
                    " ON CONFLICT (origin, vkey) DO NOTHING",
                    (origin, vkey),
                )

        self._write(work)

    def _update_log(self, origin: str, column: str, value: object) -> None:
        def work(tx: Tx) -> None:
            if not tx.execute(
                f"UPDATE logs SET {column} = ? WHERE origin = ?",  # noqa: S608 - fixed names
                (value, origin),
            ):
                raise _not_configured(origin)

        self._write(work)

    def set_disabled(self, origin: str, disabled: bool) -> None:
        """Disable or re-enable a configured log (UsageError if not configured)."""
        check_origin(origin)
        if not isinstance(disabled, bool):
            raise UsageError("disabled is a bool")
        self._update_log(origin, "disabled", disabled)

    def set_qpd(self, origin: str, qpd: int | None) -> None:
        """Set (positive) or clear (None) a configured log's quota."""
        check_origin(origin)
        self._update_log(origin, "qpd", check_qpd(qpd))

    def set_tiles(self, origin: str, url: str | None) -> None:
        """Set (a tiles URL) or clear (None) a configured log's tiles URL."""
        check_origin(origin)
        self._update_log(origin, "tiles", None if url is None else check_tiles_url(url))

    def log(self, origin: str) -> LogConfig | None:
        if not could_be_configured(origin):
            return None

        def work(tx: Tx) -> LogConfig | None:
            row = tx.one("SELECT qpd, disabled, tiles FROM logs WHERE origin = ?", (origin,))
            if row is None:
                return None
            keys = tx.all("SELECT vkey FROM log_keys WHERE origin = ? ORDER BY vkey", (origin,))
            return _log_config(origin, row[0], row[1], [k for (k,) in keys], row[2])

        return self._read(work)

    def logs(self) -> list[LogConfig]:
        return self._read(_all_logs)

    # --- checkpoints ----------------------------------------------------------------------

    def latest(self, origin: str) -> Cosigned | None:
        if not could_be_configured(origin):
            return None
        row = self._read(
            lambda tx: tx.one(
                "SELECT origin, size, root, note, updated_at FROM latest WHERE origin = ?",
                (origin,),
            )
        )
        return None if row is None else _cosigned(row)

    def all_latest(self) -> list[Cosigned]:
        rows = self._read(
            lambda tx: tx.all(
                "SELECT origin, size, root, note, updated_at FROM latest ORDER BY origin"
            )
        )
        return [_cosigned(r) for r in rows]

    def compare_and_swap(self, expected: Cosigned | None, new: Cosigned) -> bool:
        """See :meth:`WitnessState.compare_and_swap` and the module docstring. UsageError for a
        malformed ``new``, an origin mismatch, a move backwards, or (expected None) an origin
        that is not configured; CommitUnknownError when the COMMIT got no verdict."""
        check_swap(expected, new)
        return self._write(lambda tx: _swap(tx, expected, new))

    def compare_and_swap_many(
        self, swaps: Sequence[tuple[Cosigned | None, Cosigned]]
    ) -> list[bool]:
        """Every swap in one transaction, one commit (one fsync on SQLite): group commit.

        Each pair is checked first as in :meth:`compare_and_swap`; one bad pair raises and
        nothing is written. The swaps run in order, so a later pair sees an earlier one's
        effect."""
        for expected, new in swaps:
            check_swap(expected, new)
        if not swaps:
            return []
        return self._write(lambda tx: [_swap(tx, expected, new) for expected, new in swaps])

    # --- evidence -----------------------------------------------------------------------------

    def add_evidence(
        self,
        origin: str,
        reason: str,
        request: bytes,
        stored_note: bytes | None,
        at: int,
        *,
        proves: bytes | None = None,
    ) -> int | None:
        """Keep evidence for a configured log (UsageError otherwise); returns its ID, or None
        when it was not kept: a row of the log already ``proves`` the same (non-None) thing,
        or the log's evidence is at :data:`MAX_EVIDENCE_PER_LOG` rows or would pass
        :data:`MAX_EVIDENCE_BYTES_PER_LOG` bytes. The reason is 1-1024 characters without
        control characters; ``proves`` is 1-64 bytes."""
        check_origin(origin)
        if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON_CHARS:
            raise UsageError(f"an evidence reason is a str of 1-{MAX_REASON_CHARS} characters")
        if CONTROL.search(reason):
            raise UsageError("the evidence reason contains a control character")
        if not isinstance(request, bytes):
            raise UsageError("the evidence request is bytes")
        if stored_note is not None and not isinstance(stored_note, bytes):
            raise UsageError("the stored note is bytes or None")
        check_int(at, "the evidence time", 0)
        if proves is not None and (not isinstance(proves, bytes) or not 1 <= len(proves) <= 64):
            raise UsageError("what evidence proves is 1-64 bytes or None")
        size = len(request) + (0 if stored_note is None else len(stored_note))

        def work(tx: Tx) -> int | None:
            # The log's row, locked: evidence of one log is counted and added one writer at a
            # time (PostgreSQL; SQLite's writers are serialised anyway).
            locked = f"SELECT 1 FROM logs WHERE origin = ?{tx.dialect.lock_suffix}"  # noqa: S608
            if tx.one(locked, (origin,)) is None:
                raise _not_configured(origin)
            if proves is not None and tx.one(
                "SELECT 1 FROM evidence WHERE origin = ? AND proves = ?", (origin, proves)
            ):
                return None
            used = tx.one(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(request) + COALESCE(LENGTH(stored_note), 0)),"
                " 0) FROM evidence WHERE origin = ?",
                (origin,),
            )
            assert used is not None
            if (
                int(used[0]) >= MAX_EVIDENCE_PER_LOG
                or int(used[1]) + size > MAX_EVIDENCE_BYTES_PER_LOG
            ):
                return None
            row = tx.one(
                "INSERT INTO evidence (origin, reason, request, stored_note, received_at, proves)"
                " VALUES (?, ?, ?, ?, ?, ?) RETURNING id",
                (origin, reason, request, stored_note, at, proves),
            )
            assert row is not None
            return _STORED.integer(row[0], "evidence ID", 1)

        return self._write(work)

    def evidence(self, origin: str | None = None, limit: int = 100) -> list[Evidence]:
        """Kept evidence, newest (highest ID) first; ``limit`` >= 1."""
        check_int(limit, "limit", 1)
        columns = "SELECT id, origin, reason, request, stored_note, received_at FROM evidence"
        params: tuple[Any, ...]
        if origin is None:
            sql, params = f"{columns} ORDER BY id DESC LIMIT ?", (limit,)
        elif not could_be_configured(origin):
            return []
        else:
            sql = f"{columns} WHERE origin = ? ORDER BY id DESC LIMIT ?"
            params = (origin, limit)
        rows = self._read(lambda tx: tx.all(sql, params))
        return [_evidence(r) for r in rows]

    def evidence_summaries(
        self, before: int | None = None, limit: int = 100
    ) -> list[EvidenceSummary]:
        """Kept evidence without its notes (their lengths instead), newest first, IDs below
        ``before`` when given; ``limit`` >= 1. Reads the primary key's order: a page costs
        ``limit`` rows."""
        check_int(limit, "limit", 1)
        columns = (
            "SELECT id, origin, reason, received_at, LENGTH(request), LENGTH(stored_note)"
            " FROM evidence"
        )
        params: tuple[int, ...]
        if before is None:
            sql, params = f"{columns} ORDER BY id DESC LIMIT ?", (limit,)
        else:
            check_int(before, "before", 1)
            sql, params = f"{columns} WHERE id < ? ORDER BY id DESC LIMIT ?", (before, limit)
        rows = self._read(lambda tx: tx.all(sql, params))
        return [
            EvidenceSummary(
                _STORED.integer(r[0], "evidence ID", 1),
                _STORED.text(r[1], "evidence origin"),
                _STORED.text(r[2], "evidence reason"),
                _STORED.integer(r[3], "evidence time"),
                _STORED.integer(r[4], "evidence request length"),
                None if r[5] is None else _STORED.integer(r[5], "evidence stored note length"),
            )
            for r in rows
        ]

    def evidence_entry(self, evidence_id: int) -> Evidence | None:
        """The evidence row ``evidence_id`` (>= 1), or None."""
        check_int(evidence_id, "evidence ID", 1)
        row = self._read(
            lambda tx: tx.one(
                "SELECT id, origin, reason, request, stored_note, received_at FROM evidence"
                " WHERE id = ?",
                (evidence_id,),
            )
        )
        return None if row is None else _evidence(row)

    # --- the status page -----------------------------------------------------------------------

    @property
    def backend(self) -> str:
        return self._d.name

    def status(self, day: int) -> list[LogStatus]:
        """One read transaction: the logs with their keys, and per log its latest size and
        time, its ``quota`` row of ``day`` and its evidence count (at most
        :data:`MAX_EVIDENCE_PER_LOG` rows a log, read through the (origin, id) index)."""
        check_int(day, "day", 0)

        def work(tx: Tx) -> list[LogStatus]:
            configs = _all_logs(tx)
            rows = tx.all(
                "SELECT l.origin, t.size, t.updated_at, q.count, e.n, e.last FROM logs l"
                " LEFT JOIN latest t ON t.origin = l.origin"
                " LEFT JOIN quota q ON q.origin = l.origin AND q.day = ?"
                " LEFT JOIN (SELECT origin, COUNT(*) AS n, MAX(received_at) AS last"
                " FROM evidence GROUP BY origin) e ON e.origin = l.origin",
                (day,),
            )
            found = {_STORED.text(r[0], "origin"): r for r in rows}
            out = []
            for config in configs:
                _, size, updated_at, count, n, last = found[config.origin]
                out.append(
                    LogStatus(
                        config,
                        None if size is None else _STORED.integer(size, "size"),
                        None if updated_at is None else _STORED.integer(updated_at, "update time"),
                        0 if count is None else _STORED.integer(count, "request count"),
                        0 if n is None else _STORED.integer(n, "evidence count"),
                        None if last is None else _STORED.integer(last, "evidence time"),
                    )
                )
            return out

        return self._read(work)

    # --- quota ---------------------------------------------------------------------------------

    def count_request(self, origin: str, day: int) -> int:
        """Count one request of a configured log (UsageError otherwise) on ``day`` >= 0."""
        check_origin(origin)
        check_int(day, "day", 0)

        def work(tx: Tx) -> int:
            with _of_configured(tx, origin):
                row = tx.one(
                    "INSERT INTO quota (origin, day, count) VALUES (?, ?, 1)"
                    " ON CONFLICT (origin, day) DO UPDATE SET count = quota.count + 1"
                    " RETURNING count",
                    (origin, day),
                )
            assert row is not None
            return _STORED.integer(row[0], "request count", 1)

        return self._write(work)

    # --- moving a witness ----------------------------------------------------------------------

    def export_state(self) -> bytes:
        def work(tx: Tx) -> bytes:
            configs = _all_logs(tx)
            latest = {
                c.origin: c
                for c in map(
                    _cosigned, tx.all("SELECT origin, size, root, note, updated_at FROM latest")
                )
            }
            return format_state([(cfg, latest.get(cfg.origin)) for cfg in configs])

        return self._read(work)

    def import_state(self, data: bytes) -> None:
        entries = parse_state(data)
        lock = self._d.lock_suffix

        def work(tx: Tx) -> None:
            refused: list[str] = []
            for cfg, cos in entries:
                o = cfg.origin
                if not tx.execute(
                    "INSERT INTO logs (origin, qpd, disabled) VALUES (?, ?, ?)"
                    " ON CONFLICT (origin) DO NOTHING",
                    (o, cfg.qpd, cfg.disabled),
                ):
                    tx.execute(
                        "UPDATE logs SET qpd = ?, disabled = (disabled OR ?) WHERE origin = ?",
                        (cfg.qpd, cfg.disabled, o),
                    )
                tx.executemany(
                    "INSERT INTO log_keys (origin, vkey) VALUES (?, ?)"
                    " ON CONFLICT (origin, vkey) DO NOTHING",
                    [(o, k) for k in cfg.keys],
                )
                if cos is None:
                    continue
                select = "SELECT size, root FROM latest WHERE origin = ?" + lock  # noqa: S608
                row = tx.one(select, (o,))
                if row is None:
                    if tx.execute(
                        "INSERT INTO latest (origin, size, root, note, updated_at)"
                        " VALUES (?, ?, ?, ?, ?) ON CONFLICT (origin) DO NOTHING",
                        (o, cos.size, cos.root, cos.note, cos.updated_at),
                    ):
                        continue
                    row = tx.one(select, (o,))  # a concurrent first checkpoint won
                    assert row is not None
                size = _STORED.integer(row[0], "size")
                root = _STORED.blob(row[1], "root", 32)
                if cos.size < size:
                    refused.append(
                        f"log {o}: the file's checkpoint (size {cos.size}) is older than the"
                        f" stored one (size {size})"
                    )
                elif cos.size == size:
                    if cos.root != root:
                        refused.append(
                            f"log {o}: the file's checkpoint of size {size} has another root"
                            " than the stored one"
                        )
                else:
                    tx.execute(
                        "UPDATE latest SET size = ?, root = ?, note = ?, updated_at = ?"
                        " WHERE origin = ?",
                        (cos.size, cos.root, cos.note, cos.updated_at, o),
                    )
            if refused:
                raise UsageError(
                    "import refused, nothing was written (a witness state never moves"
                    " backwards): " + "; ".join(refused)
                )

        self._write(work)


def _log_config(
    origin: str, qpd: object, disabled: object, keys: list[object], tiles: object = None
) -> LogConfig:
    return LogConfig(
        origin,
        tuple(_STORED.text(k, "log key") for k in keys),
        None if qpd is None else _STORED.integer(qpd, "qpd", 1),
        _STORED.boolean(disabled, "disabled flag"),
        None if tiles is None else _STORED.text(tiles, "tiles URL"),
    )


def _all_logs(tx: Tx) -> list[LogConfig]:
    rows = tx.all("SELECT origin, qpd, disabled, tiles FROM logs ORDER BY origin")
    keys: dict[object, list[object]] = {}
    for origin, vkey in tx.all("SELECT origin, vkey FROM log_keys ORDER BY origin, vkey"):
        keys.setdefault(origin, []).append(vkey)
    return [
        _log_config(_STORED.text(o, "origin"), qpd, disabled, keys.get(o, []), tiles)
        for o, qpd, disabled, tiles in rows
    ]


def _evidence(r: Sequence[Any]) -> Evidence:
    return Evidence(
        _STORED.integer(r[0], "evidence ID", 1),
        _STORED.text(r[1], "evidence origin"),
        _STORED.text(r[2], "evidence reason"),
        _STORED.blob(r[3], "evidence request"),
        None if r[4] is None else _STORED.blob(r[4], "evidence stored note"),
        _STORED.integer(r[5], "evidence time"),
    )


def _cosigned(row: Sequence[Any]) -> Cosigned:
    origin, size, root, note, updated_at = row
    return Cosigned(
        _STORED.text(origin, "origin"),
        _STORED.integer(size, "size"),
        _STORED.blob(root, "root", 32),
        _STORED.blob(note, "note"),
        _STORED.integer(updated_at, "update time"),
    )


__all__ = [
    "LOG_KEY_TYPES",
    "MAX_ATTEMPTS",
    "MAX_EVIDENCE_BYTES_PER_LOG",
    "MAX_EVIDENCE_PER_LOG",
    "MAX_ORIGIN_BYTES",
    "MAX_REASON_CHARS",
    "MAX_VKEY_BYTES",
    "OWNER",
    "SCHEMA_VERSION",
    "STATE_HEADER",
    "BackendError",
    "CommitUnknownError",
    "CorruptStateError",
    "Dialect",
    "SQLState",
    "Session",
    "StateError",
    "StateSession",
    "Tx",
    "check_log_vkey",
    "check_origin",
    "could_be_configured",
    "format_state",
    "parse_state",
    "schema",
]
