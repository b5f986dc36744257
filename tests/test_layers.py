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


# The house, ground floor first. A module may import its own package and any floor below its
# own, never one above nor a neighbour on its floor: steps do not call each other sideways, and
# work that spans steps (boot, then acceptance) lives in `flows`, above them all; a night (its
# cells, each a flow, its production guard, its ladders, its end actions) above that.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("lifecycle", "errors", "formats"),
    ("home", "parallel", "redact", "table", "ticker", "faults", "durations"),
    ("leases", "crash", "dockerd", "proc", "report", "kept_log"),
    ("ledger", "manifest"),
    ("fingerprint", "evidence", "hooks", "records", "policy"),
    ("withheld",),
    ("build", "port", "demo"),
    ("boot",),
    ("archive",),
    ("results",),
    ("teardown", "audit", "why", "gc", "bake"),
    ("flows",),
    ("night",),
    ("commands",),
    ("cli",),
    ("__main__",),
)
_FLOOR = {name: number for number, names in enumerate(FLOORS) for name in names}


def _part(module: str) -> str:
    """`lifecycle.archive.run` -> `archive`; `lifecycle` -> `lifecycle`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of every lifecycle import, but those only type checkers read."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            skip.update(id(child) for child in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lifecycle"):
            yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name.startswith("lifecycle"))


def test_every_module_imports_only_downward() -> None:
    wrong = []
    for name, tree in _modules():
        here = _part(name.removesuffix(".py").removesuffix("/__init__").replace("/", "."))
        assert here in _FLOOR, f"{name}: {here} is on no floor of FLOORS"
        for line, module in _imports(tree):
            there = _part(module)
            assert there in _FLOOR, f"{name}:{line}: {there} is on no floor of FLOORS"
            if there != here and _FLOOR[there] >= _FLOOR[here]:
                wrong.append(f"{name}:{line}: {here} (floor {_FLOOR[here]}) imports {module}")
    assert wrong == []


def test_the_layer_check_sees_an_upward_import() -> None:
    tree = ast.parse("from lifecycle.teardown.run import run_teardown\n")
    [(_, module)] = list(_imports(tree))
    assert _FLOOR[_part(module)] > _FLOOR["archive"]
    guarded = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import lifecycle.cli\n"
    )
    assert list(_imports(guarded)) == []
