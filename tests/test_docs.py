"""The README and docs/ say what the code does: the README stays a short front door, every
verb has a worked example, the CLI reference (mkdocs-click) reaches every command however the
group builds them, every format named exists, and the generated parts have their sources.
`make test` also builds the site with `mkdocs build --strict` (broken links, missing pages)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import click
import pytest

from lifecycle.cli import cli
from tests.test_layers import FLOORS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
_FORMAT = re.compile(r"\blifecycle-[a-z][a-z-]*/\d+")


def _mkdocs_module(name: str) -> ModuleType:
    """Import a docs package (the `docs` extra): under CI its absence fails, elsewhere skips."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        message = f"{name} not installed ({exc}); pip install -e '.[docs]'"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> Iterator[str]:
    """Every command path under `group` as the CLI resolves it (lazily built groups too)."""
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        yield f"{prefix}{name}"
        if isinstance(command, click.Group):
            sub = click.Context(command, info_name=name, parent=ctx)
            yield from _commands(command, sub, f"{prefix}{name} ")


def _verbs() -> list[str]:
    return list(_commands(cli, click.Context(cli, info_name="lifecycle")))


def _pages() -> dict[str, str]:
    return {
        path.relative_to(DOCS).as_posix(): path.read_text() for path in sorted(DOCS.rglob("*.md"))
    }


def _worked_examples() -> str:
    """The text of every page's `## Worked example…` section."""
    sections = []
    for text in _pages().values():
        for match in re.finditer(r"^## Worked example.*?(?=^## |\Z)", text, re.M | re.S):
            sections.append(match.group(0))
    return "\n".join(sections)


def test_the_readme_is_a_front_door() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    first_block = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]
    for concept in ("Manifest", "Build", "Boot", "Cache", "Version", "Record", "Result"):
        assert f"**{concept}.**" in readme, concept
    assert "**Night.**" in readme and "**Policy.**" in readme


def test_every_readme_link_is_a_page() -> None:
    readme = (REPO / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links
    assert [link for link in links if not (REPO / link).is_file()] == []


def test_every_verb_has_a_worked_example() -> None:
    examples = _worked_examples()
    verbs = [verb for verb in _verbs() if " " not in verb]
    assert {"build", "boot", "archive", "night"} <= set(verbs)
    assert [verb for verb in verbs if f"lifecycle {verb}" not in examples] == []


def test_every_verb_has_its_section_and_the_readme_links_its_page() -> None:
    """Each verb (a group's are its commands') has a heading on a page (`pin` and `unpin` under
    one, `## lifecycle plan`), and the README's link to that page names it: `unpin` was in no
    link's words."""
    readme = (REPO / "README.md").read_text()
    named = {
        (page, word)
        for text, page in re.findall(r"\[([^\]]+)\]\(docs/([^)#]+)", readme)
        for word in re.findall(r"[a-z]+", text)
    }
    missing, verbs = [], _verbs()
    for verb in verbs:
        if any(other.startswith(f"{verb} ") for other in verbs):  # a group: see its commands
            continue
        pages = [
            page
            for page, text in _pages().items()
            if re.search(rf"^##? .*(`{verb}`|lifecycle {verb}\b)", text, re.M)
        ]
        top = verb.split()[0]
        if not any((page, top) in named for page in pages):
            missing.append((verb, pages))
    assert missing == []


def test_every_verb_offers_json_or_its_page_says_why_not() -> None:
    ctx = click.Context(cli, info_name="lifecycle")
    pages = "\n".join(_pages().values())
    without = []
    for verb in _verbs():
        command: click.Command | None = cli
        for word in verb.split():
            assert isinstance(command, click.Group)
            command = command.get_command(ctx, word)
        assert command is not None, verb
        flags = {flag for param in command.params for flag in param.opts}
        if not isinstance(command, click.Group) and "--json" not in flags:
            without.append(verb)
    assert without == ["schema"]  # a new one needs its reason on its page, as this one has
    assert [verb for verb in without if f"`{verb}` has no `--json`" not in pages] == []


def test_every_command_is_in_the_generated_reference() -> None:
    reference = (DOCS / "reference.md").read_text()
    assert "::: mkdocs-click" in reference and ":module: lifecycle.cli" in reference
    docs = _mkdocs_module("mkdocs_click._docs")
    # As mkdocs.yml renders it: attr_list on, so each heading is the full command path.
    lines = docs.make_command_docs("lifecycle", cli, depth=1, style="table", has_attr_list=True)
    titles = {line.lstrip("#").split(" {")[0].strip() for line in lines if line.startswith("#")}
    assert [verb for verb in _verbs() if f"lifecycle {verb}" not in titles] == []


def test_every_format_the_docs_name_exists() -> None:
    source = "\n".join(path.read_text() for path in (REPO / "lifecycle").rglob("*.py"))
    named = set(_FORMAT.findall((REPO / "README.md").read_text()))
    for text in _pages().values():
        named |= set(_FORMAT.findall(text))
    assert len(named) > 20
    assert sorted(name for name in named if name not in source) == []


def test_every_format_the_code_writes_is_documented() -> None:
    # The JSON outputs are in the table by hand; the records are generated from FORMATS.
    from lifecycle.formats import FORMATS

    source = "\n".join(path.read_text() for path in (REPO / "lifecycle").rglob("*.py"))
    written = set(_FORMAT.findall(source)) - set(FORMATS)
    assert len(written) > 20
    said = (DOCS / "formats.md").read_text()
    assert sorted(name for name in written if f"`{name}`" not in said) == []


def test_the_generated_parts_have_their_sources() -> None:
    hooks = _load_hooks()
    assert "<!-- generated: floors -->" in (DOCS / "development.md").read_text()
    assert "<!-- generated: record-formats -->" in (DOCS / "formats.md").read_text()
    assert "<!-- generated: exit-codes -->" in (DOCS / "exit-codes.md").read_text()
    house = hooks.floors()
    for floor in FLOORS:
        for name in floor:
            row = next(line for line in house.splitlines() if f"| `{name}` |" in line)
            assert not row.endswith("|  |"), f"{name} has no docstring to show"
    formats = hooks.record_formats()
    from lifecycle.formats import FORMATS

    assert all(f"### `{name}`" in formats for name in FORMATS)


def _load_hooks() -> ModuleType:
    _mkdocs_module("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
