"""`lifecycle schema`: the manifest JSON Schema, for editors' YAML language servers, and with
`--record KIND` the JSON Schema of an archive record format (lifecycle.records)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.formats import CURRENT
from lifecycle.manifest import Manifest
from lifecycle.policy.model import ProjectConfig
from lifecycle.records import MODELS
from lifecycle.report import Report

_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def manifest_json_schema() -> dict[str, Any]:
    """JSON Schema of one manifest file.

    A derived manifest may inherit any key through `extends`, so no key is required in a
    single file; the loader still requires them of the resolved manifest.
    """
    schema = Manifest.model_json_schema()
    _drop_required(schema)
    return {"$schema": _DIALECT, "$id": "lifecycle-manifest-v1.json", **schema}


def _drop_required(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("required", None)
        for value in node.values():
            _drop_required(value)
    elif isinstance(node, list):
        for item in node:
            _drop_required(item)


def record_json_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of one archive record format: `cache`, `boot`, `result`, `image`, `pin`, `gc`
    (the current ones) or any format's full name (the previous release's too)."""
    name = CURRENT.get(kind, kind)
    return {"$schema": _DIALECT, "$id": name, **MODELS[name].model_json_schema()}


@dataclass(frozen=True)
class SchemaReport(Report):
    """A JSON Schema, printed as it is (there is no --json: it is JSON)."""

    FORMAT: ClassVar[str] = "json-schema"
    schema: dict[str, Any]

    def text(self) -> str:
        return json.dumps(self.schema, indent=2) + "\n"


def run(ctx: Context, request: verbs.Schema) -> SchemaReport:
    """The manifest's schema, with --record a record format's, with --config lifecycle.yaml's."""
    kind = request.record_kind
    if request.config:
        schema = ProjectConfig.model_json_schema()
        return SchemaReport({"$schema": _DIALECT, "$id": "lifecycle-config-v1.json", **schema})
    return SchemaReport(record_json_schema(kind) if kind else manifest_json_schema())
