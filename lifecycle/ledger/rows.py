"""Dataclass records to and from SQLite rows: the one place that builds SQL from field names."""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

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
    for field in fields(cls):
        if field.type == "bool":
            data[field.name] = bool(data[field.name])
    return cls(**data)
