"""The package is pure Python: one `py3-none-any` wheel installs it anywhere, no compiler needed."""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
NATIVE_SOURCES = {".c", ".h", ".cc", ".cpp", ".pyx", ".pxd", ".rs"}
# An optional extra's package -> the one module that imports it (loaded only on that path).
OPTIONAL = {"ray": "lifecycle/night/cluster.py"}


def test_nothing_is_compiled_at_install() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "ext-modules" not in pyproject.get("tool", {}).get("setuptools", {})
    assert not (REPO / "setup.py").exists()
    native = [p for p in (REPO / "lifecycle").rglob("*") if p.suffix in NATIVE_SOURCES]
    assert native == []


def test_every_package_lifecycle_imports_is_a_declared_dependency() -> None:
    """Installing the wheel must bring what it imports (the demo engine's sources and the
    stand-in engine's program, which run inside their images, are data)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    declared = {
        canonicalize_name(Requirement(spec).name) for spec in pyproject["project"]["dependencies"]
    }
    extras = {
        canonicalize_name(Requirement(spec).name)
        for specs in pyproject["project"]["optional-dependencies"].values()
        for spec in specs
    }
    imported, optional = set(), {}
    for path in (REPO / "lifecycle").rglob("*.py"):
        parts = path.relative_to(REPO / "lifecycle").parts
        if "upstream" in parts or parts[:2] == ("demo", "in_image"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = {node.module.split(".")[0]}
            else:
                continue
            for name in names & OPTIONAL.keys():  # an extra's package: only where it is allowed
                optional.setdefault(name, set()).add(path.relative_to(REPO).as_posix())
            imported |= names - OPTIONAL.keys()
    # _typeshed: type checkers' own, imported under TYPE_CHECKING only.
    third_party = imported - set(sys.stdlib_module_names) - {"lifecycle", "__future__", "_typeshed"}
    distributions = packages_distributions()
    undeclared = {
        module: distributions.get(module)
        for module in third_party
        if not {canonicalize_name(d) for d in distributions.get(module, [])} & declared
    }
    assert undeclared == {}
    assert {"docker", "botocore", "boto3", "yaml"} <= third_party
    assert optional == {name: {where} for name, where in OPTIONAL.items()}
    assert {canonicalize_name(name) for name in OPTIONAL} <= extras
