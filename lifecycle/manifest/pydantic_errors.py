"""Turn pydantic's errors into located, actionable `Problem`s ("did you mean …?")."""

from __future__ import annotations

import difflib
import types
import typing
import unicodedata
from typing import Any

from pydantic import BaseModel, ValidationError

from lifecycle.errors import Problem, did_you_mean
from lifecycle.manifest.model import Manifest
from lifecycle.manifest.source import KeyPath, Located, render_key_path

MAX_HINTS = 50


def problems_from_validation(
    exc: ValidationError, located: Located, root: type[BaseModel] = Manifest
) -> list[Problem]:
    """One problem per offending key path, in document order; hints name `root`'s keys (the
    manifest's, or another document's validated the same way, such as a night plan)."""
    errors = [(_data_path(located.data, tuple(e["loc"])), e) for e in exc.errors(include_url=False)]
    unknown = {path for path, e in errors if e["type"] == "extra_forbidden"}
    # A mapping's key that fails its own validation is shown where the key is written.
    keys = unknown | {path for path, e in errors if e["loc"][-1:] == ("[key]",)}
    # Hints cost a fuzzy match each; past a few dozen unknown keys the file is not a typo away.
    hints = len(unknown) <= MAX_HINTS
    # A typo is one mistake: `flashinfr` unknown explains `flashinfer` missing, so say it once.
    typo_targets = {
        (*path[:-1], hint) for path in unknown if hints and (hint := _typo_hint(root, path))
    }
    messages: dict[KeyPath, list[str]] = {}
    for path, error in errors:
        if error["type"] == "missing" and path in typo_targets:
            continue
        if path in unknown:
            message = _unknown_key_message(root, path, hints)
        elif path in keys and path:  # a key its mapping refuses: one that only looks right?
            message = _message(error) + _not_ascii(str(path[-1]))
        else:
            message = _message(error)
        bucket = messages.setdefault(path, [])
        if message not in bucket:
            bucket.append(message)
    problems = []
    for path, texts in messages.items():
        mark = located.mark(path, prefer_key=path in keys)
        assert mark is not None, "the document root always has a mark"
        text = texts[0] if len(texts) == 1 else "expected one of: " + "; ".join(texts)
        problems.append(Problem(mark.file, mark.line, mark.col, render_key_path(path), text))
    return sorted(problems, key=lambda p: (str(p.file), p.line, p.col))


def _data_path(data: Any, loc: tuple[int | str, ...]) -> KeyPath:
    """Cut pydantic's loc where it leaves the data (union member names, validator tags)."""
    path: list[str | int] = []
    for part in loc:
        if isinstance(data, dict) and part in data:
            path.append(str(part))  # as the YAML reader keys its marks (8000, not [8000])
            data = data[part]
        elif isinstance(data, dict):
            path.append(part)
            data = None
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            path.append(part)
            data = data[part]
        else:
            break
    return tuple(path)


def _message(error: Any) -> str:
    kind: str = error["type"]
    text: str = error["msg"]
    if kind == "missing":
        return "required key is missing"
    if kind == "value_error":
        return text.removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, str | int | float | bool) or value is None:
        return f"{text} (got {value!r})"
    return f"{text} (got a {type(value).__name__})"


def _typo_hint(root: type[BaseModel], path: KeyPath) -> str | None:
    hints = difflib.get_close_matches(str(path[-1]), _fields_at(root, path[:-1]), n=1, cutoff=0.6)
    return hints[0] if hints else None


def _unknown_key_message(root: type[BaseModel], path: KeyPath, hints: bool) -> str:
    message = f"unknown key {str(path[-1])!r}{_not_ascii(str(path[-1]))}"
    allowed = _fields_at(root, path[:-1])
    expected = f"; expected one of: {', '.join(allowed)}" if allowed else ""
    return message + (did_you_mean(str(path[-1]), allowed, expected) if hints else expected)


def _not_ascii(key: str) -> str:
    """` (its 'x' is U+0430 CYRILLIC SMALL LETTER A; not ASCII)`, 'x' being that letter, for
    a key holding a letter that looks like an ASCII one and is not: it reads right and never
    matches."""
    odd = list(dict.fromkeys(char for char in key if not char.isascii()))
    if not odd:
        return ""
    named = ", ".join(f"{c!r} is U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in odd[:3])
    return f" (its {named}{', …' if len(odd) > 3 else ''}; not ASCII)"


def _fields_at(root: type[BaseModel], path: KeyPath) -> list[str]:
    """The keys the schema allows at `path` (walking models, dicts and lists)."""
    current: Any = root
    for part in path:
        current = _step(current, part)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _step(annotation: Any, part: str | int) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(str(part))
        return _unwrap(field.annotation) if field else None
    origin = typing.get_origin(annotation)
    if origin is dict:
        return _unwrap(typing.get_args(annotation)[1])
    if origin is list:
        return _unwrap(typing.get_args(annotation)[0])
    return None


def _unwrap(annotation: Any) -> Any:
    """`X | None` → X; Annotated[X, …] → X."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return annotation
