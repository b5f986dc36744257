"""MkDocs hook: fills the pages' generated parts from the code, so they cannot go stale.

A page asks for one with a marker line, `<!-- generated: NAME -->`; an unknown NAME fails the
build. The exit codes come from lifecycle.errors, the record formats from lifecycle.formats
and their JSON Schemas (what `lifecycle schema --record KIND` prints), the house from the
floors tests/test_layers.py enforces.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent.parent
# This checkout's code, whatever copy of lifecycle is installed.
sys.path.insert(0, str(ROOT))

from lifecycle.errors import EXIT_CODES  # noqa: E402
from lifecycle.formats import CURRENT, FORMATS  # noqa: E402

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def exit_codes() -> str:
    """The exit-code table `lifecycle --help` prints."""
    rows = [f"| {code} | {meaning} |" for code, meaning in EXIT_CODES]
    return "\n".join(["| exit | meaning |", "|---|---|", *rows])


def record_formats() -> str:
    """Each archive record format: its model's description and its top-level fields."""
    from lifecycle.commands.schema import record_json_schema as json_schema

    kind_of = {name: kind for kind, name in CURRENT.items()}
    sections = []
    for name in FORMATS:
        schema = json_schema(name)
        kind = kind_of.get(name)
        written = (
            f"Written now; `lifecycle schema --record {kind}` prints its JSON Schema."
            if kind
            else f"Read, no longer written; `lifecycle schema --record {name}` prints its "
            "JSON Schema."
        )
        nested = [
            f"- `{defname}`: {_fields(spec)}" for defname, spec in schema.get("$defs", {}).items()
        ]
        sections.append(
            "\n".join(
                [
                    f"### `{name}`",
                    "",
                    _cell(schema.get("description", "")),
                    "",
                    written,
                    "",
                    _table(schema),
                    *(["", "Inside it:", "", *nested] if nested else []),
                ]
            )
        )
    return "\n\n".join(sections)


def _table(schema: dict[str, Any]) -> str:
    required = set(schema.get("required", ()))
    rows = [
        f"| `{field}` | {_type(spec)} | {'yes' if field in required else 'no'} |"
        for field, spec in schema["properties"].items()
    ]
    return "\n".join(["| field | type | required |", "|---|---|---|", *rows])


def _fields(spec: dict[str, Any]) -> str:
    fields = ", ".join(f"`{field}`" for field in spec.get("properties", {}))
    about = _cell(spec.get("description", "")).split(". ")[0].rstrip(".")
    return f"{about}: {fields}" if about and fields else about or fields or "(no fields)"


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        return str(spec["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in spec:
        return " or ".join(_type(option) for option in spec["anyOf"])
    if spec.get("type") == "array":
        return f"array of {_type(spec.get('items', {}))}"
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    return str(spec.get("type", "any"))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def floors() -> str:
    """The house, top floor first: each floor's modules and the first paragraph of each one's
    docstring."""
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests/test_layers.py")
    assert spec and spec.loader
    layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers)
    rows = []
    for number, names in reversed(list(enumerate(layers.FLOORS))):
        for name in names:
            rows.append(f"| {number} | `{name}` | {_cell(_summary(name))} |")
    return "\n".join(["| floor | module | what it is |", "|---|---|---|", *rows])


def _summary(name: str) -> str:
    package = ROOT / "lifecycle"
    if name == "lifecycle":
        path = package / "__init__.py"
    elif (package / name).is_dir():
        path = package / name / "__init__.py"
    else:
        path = package / f"{name}.py"
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return doc.split("\n\n", 1)[0]


GENERATED = {"exit-codes": exit_codes, "record-formats": record_formats, "floors": floors}


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Replace each marker with what the code says."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise PluginError(f"{page.file.src_path}: no generated part named {name!r}")
        return GENERATED[name]()

    return MARKER.sub(fill, markdown)
