"""What a verb returns: a typed report that says its own exit code and prints as tagged JSON.

Every `--json` output is one object whose `format` names it and its version
(`lifecycle-<verb>/<n>`), followed by the report's fields; docs/formats.md lists them. A field is
never a JSON string holding JSON.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar

from lifecycle.errors import EXIT_OK
from lifecycle.table import render, visible

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class Report:
    """Base of the verbs' frozen dataclass reports."""

    FORMAT: ClassVar[str]

    @property
    def exit_code(self) -> int:
        """0 unless the report says otherwise (lifecycle.errors has the table)."""
        return EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        """Lines for stderr, whichever form stdout takes (problems, warnings)."""
        return ()

    def text(self) -> str:
        """What the verb prints without --json; by default that JSON (a spec, a plan)."""
        return json.dumps(self.to_json(), indent=2) + "\n"

    def to_json(self) -> dict[str, Any]:
        """`{"format": FORMAT, …fields}`."""
        fields = plain(self)
        assert isinstance(fields, dict), "a report is a dataclass"
        return {"format": self.FORMAT, **fields}

    def json_text(self) -> Iterator[str]:
        """What `--json` prints, `to_json` indented by 2, in pieces to write one after another."""
        yield json.dumps(self.to_json(), indent=2)


def unread_lines(unread: Mapping[str, str], done: str = "left out") -> tuple[str, ...]:
    """A line for each archive record that could not be read (s3:// URL -> why), and what was
    done with it (`left out`, `passed over`), for stderr or an audit's warnings. The why may
    hold the record's own fields (the id it says it is), which its writer chose."""
    return tuple(
        f"{done}: cannot read {visible(url)}: {visible(why)}" for url, why in unread.items()
    )


@dataclass(frozen=True)
class Listing(Report):
    """A listing verb's answer: rows, as a table or as JSON under `key` (`caches`, `boots`,
    `results`); one of an archive is headed by its location."""

    format: str  # lifecycle-caches/1, lifecycle-archived-boots/1, …
    key: str
    rows: tuple[Any, ...]  # each a Row, or a dataclass whose fields are its JSON
    columns: str  # their headers, space-separated
    cells: Callable[[Any], list[object]]  # a row's cells, in the columns' order
    location: str | None = None  # s3://bucket/prefix, for a listing of an archive
    # A row's line under the table, for what is too long for a cell (why a cache is passed over)
    note: Callable[[Any], str | None] = lambda row: None
    # An archive's records that could not be read (s3:// URL -> why): left out of the rows
    unreadable: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def notes(self) -> tuple[str, ...]:
        return unread_lines(self.unreadable)

    def to_json(self) -> dict[str, Any]:
        return self._around_rows(plain(self.rows))

    def _around_rows(self, rows: list[Any]) -> dict[str, Any]:
        where = {} if self.location is None else {"location": self.location}
        unread = {"unreadable": dict(self.unreadable)} if self.unreadable else {}
        return {"format": self.format, **where, self.key: rows, **unread}

    def json_text(self) -> Iterator[str]:
        """`to_json` indented by 2, each row's text made as it is written: a year of caches
        was 606 MiB as one document (every row's dict, the encoder's pieces, the text)."""
        # The rows' empty list at the top level of the document is the one line `\n  "KEY": []`
        # in it: a string's newline is escaped, a nested key is indented further.
        whole = json.dumps(self._around_rows([]), indent=2)
        head, tail = whole.split(f'\n  "{self.key}": []', 1)
        yield f'{head}\n  "{self.key}": ['
        between = "\n    "
        for row in self.rows:
            yield between + json.dumps(plain(row), indent=2).replace("\n", "\n    ")
            between = ",\n    "
        yield ("]" if between == "\n    " else "\n  ]") + tail

    def text(self) -> str:
        table = render(self.columns.split(), [self.cells(row) for row in self.rows])
        table += "".join(f"{note}\n" for row in self.rows if (note := self.note(row)))
        return table if self.location is None else f"# {self.location}\n{table}"


class Row:
    """An item of a listing that prints as one flat JSON object: its record's fields and
    what the listing adds to them."""

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


_SCALARS = frozenset({str, int, float, bool})


def plain(value: Any) -> Any:
    """JSON-ready data of a report's field: dataclasses, pydantic models, enums, paths, tuples."""
    if value is None or type(value) in _SCALARS:  # most fields: a listing has millions
        return value
    if isinstance(value, Row):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return fields_of(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [plain(v) for v in value]
        return sorted(items) if isinstance(value, set | frozenset) else items
    if _is_model(value):
        return value.model_dump(mode="json")
    return value


def _is_model(value: Any) -> bool:
    """Whether `value` is a pydantic model, without importing pydantic to ask: where it was
    never imported, nothing is one (a listing of this host's ledger has no model to print)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def fields_of(value: DataclassInstance) -> dict[str, Any]:
    """A dataclass's fields, each as plain data (a Row's own to_json starts from these)."""
    return {name: plain(getattr(value, name)) for name in _field_names(type(value))}


@cache
def _field_names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    """A dataclass's field names, asked once per class: `dataclasses.fields` of each of a
    listing's records was a fifth of writing its JSON."""
    return tuple(f.name for f in dataclasses.fields(cls))
