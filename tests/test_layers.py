"""The shape of the package, enforced: the ledger owns every table (no SQL anywhere else)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lifecycle"
_SQL = re.compile(
    r"^\s*(SELECT\b|INSERT (OR \w+ )?INTO\b|UPDATE \w+ SET\b|DELETE FROM\b|"
    r"(CREATE|DROP|ALTER) (TABLE|INDEX)\b|PRAGMA\b|BEGIN\b)"
)
_DB_CALLS = {"query", "transaction", "execute", "executemany", "executescript"}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent)
        if "upstream" in relative.parts or "in_image" in relative.parts:
            continue  # the demo engine's sources and the build's in-image helpers: data
        yield relative.as_posix(), ast.parse(path.read_text(), str(relative))


def test_no_sql_outside_the_ledger() -> None:
    found = []
    for name, tree in _modules():
        if name.startswith("lifecycle/ledger/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if _SQL.match(node.value):
                    found.append(f"{name}:{node.lineno}: SQL text {node.value[:40]!r}")
            elif isinstance(node, ast.Attribute) and node.attr in _DB_CALLS:
                found.append(f"{name}:{node.lineno}: .{node.attr}(…) on a database")
    assert found == []


def test_the_check_finds_sql_where_it_is() -> None:
    sql = [name for name, tree in _modules() if name.startswith("lifecycle/ledger/")]
    assert "lifecycle/ledger/boots.py" in sql
    assert _SQL.match("UPDATE caches SET state = ?") and _SQL.match("INSERT OR IGNORE INTO pins")
    assert not _SQL.match("Create the boot's container; dockerd's refusal is one line")
    tree = ast.parse('rows = ledger.query("SELECT * FROM boots")')
    assert [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in _DB_CALLS]
