"""The local ledger: SQLite (WAL) under LIFECYCLE_HOME, schema migrated by version, and the one
place that builds SQL from a record's field names (`insert`, `update`, `from_row`).

Evidence files (build and boot logs) are written beside it first, renamed into place, and
only then referenced by a row, so a killed process leaves at worst an orphan file, never a
row that points at nothing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lifecycle.errors import DiskFull
from lifecycle.home import (
    Home,
    HomeUnusable,
    NoLedger,
    check_home,
    check_writable,
    default_home,
    write_atomic,
)
from lifecycle.leases import exclusive
from lifecycle.ledger.schema import MIGRATIONS

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


__all__ = ["HomeUnusable", "Ledger", "NoLedger", "default_home", "has_ledger"]

Record = TypeVar("Record", bound="DataclassInstance")


def insert(
    conn: sqlite3.Connection,
    table: str,
    record: Any,
    *,
    skip: tuple[str, ...] = (),
    on_conflict: str | None = None,
) -> None:
    """INSERT one record; column names are its field names (less `skip`, e.g. a rowid).
    `on_conflict` with a row of the same primary key: REPLACE it (the record is then the
    newest row), or IGNORE the record."""
    values = {k: v for k, v in asdict(record).items() if k not in skip}
    names = ", ".join(values)
    marks = ", ".join("?" for _ in values)
    verb = f"INSERT OR {on_conflict}" if on_conflict else "INSERT"
    conn.execute(f"{verb} INTO {table} ({names}) VALUES ({marks})", tuple(values.values()))


def update(
    conn: sqlite3.Connection, table: str, record: Any, *, key: str | tuple[str, ...]
) -> None:
    """UPDATE the row whose `key` column(s) equal the record's, setting every other field."""
    keys = (key,) if isinstance(key, str) else key
    values = asdict(record)
    assignments = ", ".join(f"{name} = ?" for name in values if name not in keys)
    params = [value for name, value in values.items() if name not in keys]
    where = " AND ".join(f"{name} = ?" for name in keys)
    conn.execute(
        f"UPDATE {table} SET {assignments} WHERE {where}",
        (*params, *(values[name] for name in keys)),
    )


def from_row(cls: type[Record], row: sqlite3.Row) -> Record:
    """A record from a row; SQLite's 0/1 become bools where the field is a bool."""
    data = dict(row)
    for name in _bool_fields(cls):
        data[name] = bool(data[name])
    return cls(**data)


@cache
def _bool_fields(cls: type[DataclassInstance]) -> tuple[str, ...]:
    """The record's bool fields: asked once per class, not per row (`fields` per row was half
    of reading a year of boots)."""
    return tuple(field.name for field in fields(cls) if field.type == "bool")


# A column among a set of ids given as one JSON array (`among`): any number of them in one
# statement, where SQLite takes a few thousand `?` at most.
AMONG = "IN (SELECT value FROM json_each(?))"


def among(ids: Iterable[str]) -> tuple[str]:
    """The one value of AMONG's `?`: the ids, each once, as a JSON array."""
    return (json.dumps(list(dict.fromkeys(ids))),)


_SQLITE_MAGIC = b"SQLite format 3\x00"
# SQLite's codes for a full disk: a page that would not fit, or the WAL's shared-memory file
# that could not grow when it was opened (SQLite documents that as most likely no space left).
_NO_ROOM = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMSIZE)


class Ledger:
    """Open with `Ledger.open(home)`; every write is one transaction."""

    def __init__(self, home: Home, conn: sqlite3.Connection) -> None:
        self._home = home  # its file, lock and evidence dir; callers are given the Home
        self._conn = conn

    def __str__(self) -> str:
        """`the ledger at HOME`: what a message that names where it looked shows."""
        return f"the ledger at {self._home}"

    @classmethod
    def open(cls, home: Home | Path, *, create: bool = True) -> Ledger:
        """Open (and migrate) the ledger at `home/ledger.sqlite3`, made if `create`.

        Without `create`, a home with no ledger is NoLedger and nothing is written: verbs
        that only read must not leave an empty ledger behind. A home or ledger that cannot be
        used (a file, read-only, not a ledger, truncated, of a newer schema) is HomeUnusable,
        found before anything is written."""
        home = home if isinstance(home, Home) else Home(home)
        path = home.ledger_file
        check_home(home.root, create=create)
        if not _has_ledger(path) and not create:
            raise NoLedger(home.root)
        check_writable(home.root)
        try:
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            ledger = cls(home, conn)
            ledger._migrate()
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.Error as exc:
            if exc.sqlite_errorcode in _NO_ROOM:
                raise DiskFull(path) from None
            raise HomeUnusable(f"the ledger {path} cannot be used: {exc}") from None
        except OSError as exc:
            raise HomeUnusable(f"the ledger {path} cannot be used: {exc}") from None
        return ledger

    @classmethod
    def empty(cls, home: Home) -> Ledger:
        """A ledger of this schema holding nothing, in memory: what a home where nothing is
        recorded yet reads as, to a verb that only reads (a plan, a dry run), which so makes no
        ledger there. Never written to: nothing would be kept."""
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.row_factory = sqlite3.Row
        _migrate_from(conn, 0)
        conn.execute("PRAGMA foreign_keys=ON")
        return cls(home, conn)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One writer across processes: a file lock, then BEGIN IMMEDIATE, then all or nothing."""
        # SQLite's own lock is taken per transaction; the file lock also orders the evidence
        # writes that go with it, and waits instead of failing with "database is locked".
        with exclusive(self._home.ledger_lock):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")  # a full disk can fail it: rolled back below
            except sqlite3.OperationalError as exc:
                self._rollback()
                if exc.sqlite_errorcode in _NO_ROOM:
                    # Nothing of the transaction was kept; the ledger is as it was before it.
                    raise DiskFull(self._home.ledger_file) from exc
                raise
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        # SQLite may have rolled a failed transaction back itself (SQLITE_FULL can): then
        # there is none to roll back, and ROLLBACK would raise over the error that matters.
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        """Rows of a read-only query."""
        return self._conn.execute(sql, params).fetchall()

    def records(self, cls: type[Record], sql: str, params: tuple[object, ...] = ()) -> list[Record]:
        """A read-only query's rows as `cls` records, each made as the cursor gives its row:
        a year's 80,000 uses held as rows and records at once were 8 MiB of a listing's peak."""
        return [from_row(cls, row) for row in self._conn.execute(sql, params)]

    def record(self, cls: type[Record], sql: str, params: tuple[object, ...] = ()) -> Record | None:
        """The first row of a read-only query as a `cls` record, or None when there is none."""
        rows = self.query(sql, params)
        return from_row(cls, rows[0]) if rows else None

    def _migrate(self) -> None:
        # Look, lock, look again: a ledger already of this schema is only read, so that a verb
        # that reads neither waits for a writer mid-transaction (WAL reads beside it) nor takes,
        # or makes, the writers' lock file.
        if self._schema() == len(MIGRATIONS):
            return
        # A migration that rebuilds a table needs foreign keys off while it runs, which SQLite
        # takes only outside a transaction; they are checked before the migration commits.
        self._conn.execute("PRAGMA foreign_keys=OFF")
        try:
            with self.transaction() as conn:
                _migrate_from(conn, self._schema())
        finally:
            self._conn.execute("PRAGMA foreign_keys=ON")

    def _schema(self) -> int:
        """The ledger's schema number; HomeUnusable when a newer lifecycle wrote it."""
        version: int = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise HomeUnusable(_newer(self._home.ledger_file, version))
        return version

    def keep_evidence(self, kind: str, name: str, content: bytes) -> Path:
        """Write an evidence file atomically under evidence/<kind>/ and return its path."""
        final = self._home.evidence(kind) / name
        write_atomic(final, content)
        return final


def _migrate_from(conn: sqlite3.Connection, version: int) -> None:
    """Run the migrations after schema `version`, each numbered as it ends; foreign keys off."""
    for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
        for statement in filter(str.strip, script.split(";")):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    broken = conn.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise RuntimeError(f"ledger migration left broken references: {broken[:3]}")


def has_ledger(home: Path) -> bool:
    """Whether anything was ever recorded in `home`, read without writing anything;
    HomeUnusable when the home or its ledger cannot be used."""
    try:
        check_home(home, create=False)
    except NoLedger:
        return False
    return _has_ledger(Home(home).ledger_file)


def _has_ledger(path: Path) -> bool:
    """Whether `path` holds a ledger to open; HomeUnusable when it holds something else.

    Read from the file's own header (SQLite's format: magic, page size, page count, the
    user_version that numbers our schema), so a garbage, truncated or newer ledger is
    refused before SQLite or a migration writes to it."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise HomeUnusable(f"the ledger {path} is not a file")
        with path.open("rb") as handle:
            header = handle.read(100)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise HomeUnusable(f"the ledger {path} cannot be read: {exc.strerror}") from None
    if size == 0:
        return False  # what sqlite3.connect leaves before the first write: no ledger yet
    if not header.startswith(_SQLITE_MAGIC):
        raise HomeUnusable(f"the ledger {path} is not a SQLite database (not a ledger)")
    if len(header) < 100:
        raise HomeUnusable(f"the ledger {path} is truncated ({size} bytes)")
    version = int.from_bytes(header[60:64], "big")
    if version > len(MIGRATIONS):
        raise HomeUnusable(_newer(path, version))
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The page count is valid when its "version-valid-for" matches the change counter. With
    # a write-ahead log beside it, another process's checkpoint may be writing the file this
    # moment (the header first, the pages after): SQLite reads it with the log, and so judges.
    try:
        settled = path.with_name(f"{path.name}-wal").stat().st_size == 0
    except FileNotFoundError:
        settled = True
    if settled and header[24:28] == header[92:96] and size < pages * page_size:
        raise HomeUnusable(f"the ledger {path} is truncated ({size} of {pages * page_size} bytes)")
    return True


def _newer(path: Path, version: int) -> str:
    return (
        f"the ledger {path} has schema {version}; this lifecycle knows schemas up to "
        f"{len(MIGRATIONS)}: use a newer lifecycle with this LIFECYCLE_HOME"
    )
