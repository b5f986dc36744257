"""Secret values in a cache's paths, spelled by the secret's name in everything kept or sent.

A file's name can hold a secret as well as its bytes (`hub/models--x--<token>.ref`). A name
holding a secret's value is masked the way `redact` spells it, `hub/models--x--<redacted:
HF_TOKEN>.ref`, in the fingerprint itself, so the tree digest, the kept scans, the ledger, the
archive and every message see only the mask.

While a boot runs, its secrets' values are known. Later scans do not know them: they find them
again in the tree, never on disk elsewhere. An entry that is still the one a masked entry of the
previous scan was (same inode, its real path fitting the mask) gives back, in memory for this
scan only, the value its placeholder hides, and every name holding that value is masked. A
name is never masked for its shape alone: `models--org--name` beside `models--<token>` stays.

Two names of one dir masked alike (two values of one secret, say before and after a rotation)
are told apart as `<redacted:HF_TOKEN~2>`, …, in the order of their real names. Everything
below a masked dir is masked with it. Only whole names are looked at: a value holding `/`
spans dirs and is not found.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import groupby

from lifecycle.redact import MIN_SECRET_LEN, redact_values

_MARK = "<redacted:"
PLACEHOLDER = re.compile(r"<redacted:([^<>/~]+)(?:~(\d+))?>")


def is_masked(path: str) -> bool:
    """Whether a (fingerprint's) path had a secret's value in it: its real name is not kept."""
    return _MARK in path and PLACEHOLDER.search(path) is not None


def secrets_in_path(path: str) -> list[str]:
    """The names of the secrets a masked path held, sorted."""
    return sorted({match[1] for match in PLACEHOLDER.finditer(path)})


def mask_paths(
    walked: Iterable[tuple[str, int]],
    secrets: Mapping[str, str],
    masked_before: Iterable[tuple[str, int]] = (),
) -> dict[str, str]:
    """real path -> masked path, for every (real path, inode) of a whole tree that is masked:
    by the `secrets`' values (name -> value) and by the values the entries the previous scan
    masked (`masked_before`: their (masked path, inode)) are found to hide again."""
    masked: dict[str, str] = {}
    values = {(name, value) for name, value in secrets.items() if value}
    before = {inode: path for path, inode in masked_before if is_masked(path)}
    if not values and not before:  # nearly every scan: nothing to look for
        return masked
    walked = list(walked)
    values |= _found_again(walked, before)
    if not values:
        return masked
    # Longest value first, as redact does: a value holding another is replaced whole.
    ordered = sorted(values, key=lambda pair: (-len(pair[1]), pair))
    # By depth: a dir's final mask is known before its children are looked at.
    by_depth = sorted((real for real, _ in walked), key=lambda real: (real.count("/"), real))
    for _, level in groupby(by_depth, key=lambda real: real.count("/")):
        named: dict[str, list[str]] = {}  # masked path -> real paths masked to it
        for real in level:
            parent, _, name = real.rpartition("/")
            parent = masked.get(parent, parent)
            for secret, value in ordered:
                name = redact_values(name, {secret: value})
            named.setdefault(f"{parent}/{name}" if parent else name, []).append(real)
        for mask, reals in named.items():
            if len(reals) == 1 and reals[0] == mask:
                continue
            plain = mask in reals  # a real name that is spelled like the mask
            others = sorted(real for real in reals if real != mask)
            for number, real in enumerate(others, start=2 if plain else 1):
                masked[real] = mask if number == 1 else _numbered(mask, number)
    return masked


def _found_again(
    walked: Iterable[tuple[str, int]], before: Mapping[int, str]
) -> set[tuple[str, str]]:
    """(name, value) of each secret a masked entry of the previous scan (inode -> masked path)
    hides, read off the entry it still is."""
    found: set[tuple[str, str]] = set()
    for real, inode in walked:
        masked = before.get(inode)
        if masked is None:
            continue
        pattern, secrets = _pattern(masked)
        if match := pattern.fullmatch(real):
            found |= {(secrets[i], match[f"g{i}"]) for i in range(len(secrets))}
    return found


def _pattern(masked_path: str) -> tuple[re.Pattern[str], list[str]]:
    """A masked path as a pattern of the real path it stands for, and the secret whose value
    each group `g<i>` holds (one group per placeholder: the same one twice is one value)."""
    parts: list[str] = []
    groups: dict[str, int] = {}  # placeholder -> its group
    secrets: list[str] = []
    at = 0
    for match in PLACEHOLDER.finditer(masked_path):
        parts.append(re.escape(masked_path[at : match.start()]))
        if match[0] in groups:
            parts.append(f"(?P=g{groups[match[0]]})")
        else:
            groups[match[0]] = len(secrets)
            parts.append(f"(?P<g{len(secrets)}>[^/]{{{MIN_SECRET_LEN},}})")
            secrets.append(match[1])
        at = match.end()
    parts.append(re.escape(masked_path[at:]))
    return re.compile("".join(parts)), secrets


def _numbered(mask: str, number: int) -> str:
    """`mask` with its last name's first placeholder numbered (`<redacted:HF_TOKEN~2>`)."""
    parent, slash, name = mask.rpartition("/")
    match = PLACEHOLDER.search(name)
    if match is None:  # only a dir above was masked: its children have their own names
        return mask
    numbered = f"{_MARK}{match[1]}~{number}>"
    return f"{parent}{slash}{name[: match.start()]}{numbered}{name[match.end() :]}"
