"""Secrets kept out of what leaves this host: credentials redacted in text (boot logs, cache
evidence), by the values the caller knows and by their shape; and secret values in a cache's
paths masked as `redact` spells them (`<redacted:HF_TOKEN>`) in the fingerprint itself, so the
tree digest, the ledger, the archive and every message see only the mask. docs/verbs/boot.md
says which shapes are caught and how a later scan, which knows no value, finds a mask again."""

from __future__ import annotations

import functools
import itertools
import json
import mmap
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from pathlib import Path
from typing import TypeAlias

MIN_SECRET_LEN = 4

# name -> value gives `<redacted:NAME>`; a bare sequence of values gives `<redacted>`.
Secrets: TypeAlias = Mapping[str, str] | Sequence[str]

# `scheme://user:password@` keeps the user; a userinfo of one part is the credential itself
# (`https://ghp_…@github.com`, GitHub's token URL), and goes whole.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/:@]+)(?::([^\s/@]+))?@")
_LEADING_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/?#]*@")
_AUTH_HEADER = re.compile(
    r"""(?i)\b(authorization["']?[ \t]*[:=][ \t]*["']?)"""
    r"""(?:(bearer|basic|token|digest|negotiate)[ \t]+)?([^\s"',;]+)"""
)
_BEARER = re.compile(r"(?i)\b(bearer)[ \t]+([A-Za-z0-9\-._~+/]{8,}=*)")
_HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{30,}")
_AWS_KEY_ID = re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])")
_PAIR = re.compile(
    r"""(?<![\w.\-])(?P<q>["']?)(?P<key>-{0,2}[A-Za-z_][\w.\-]*)(?P=q)"""
    r"""(?P<sep>[ \t]*[:=][ \t]*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|\[[^\]\n]*\]|[^\s,;&"'<>(){}\[\]]+)"""
)
_FLAG = re.compile(
    r"""(?<![\w\-])(?P<key>--?[A-Za-z][\w\-]*)(?P<sep>[ \t]+|["'],[ \t]*["'])"""
    r"""(?P<value>[^\s"'<>\-][^\s"'<>]*)"""
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "credential", "credentials", "auth", "apikey"}
)
_KEY_PAIRS = frozenset({("api", "key"), ("access", "key")})
# Every key is_sensitive_key accepts holds one of these once lowercased: a text holding none
# skips the two passes that call back into Python per `key: value` (most of a JSON file's cost).
_KEY_HINTS = tuple(sorted(_KEY_WORDS | {first for first, _ in _KEY_PAIRS}))
# `token_file: /run/x`, `auth_type: none`: the key is about a credential, the value is not one.
_HARMLESS_LAST = frozenset(
    {"file", "path", "dir", "url", "uri", "endpoint", "type", "mode", "method", "name", "len"}
)
# Bare values that are never credentials; keeping them also keeps redacted JSON valid.
_LITERALS = frozenset({"null", "none", "true", "false"})
# After `key: ` a bare word is prose, not a value: `leak_secret: wrote 3 files`. After `=`, or
# quoted, or holding a digit or a symbol (`password: hunter22`), it is taken as a credential.
_PROSE_WORD = re.compile(r"[A-Za-z][a-z]+")


def redact(text: str, secret_values: Secrets) -> str:
    """`text` with every given secret value and everything shaped like a credential replaced."""
    pairs = _spellings(secret_values)
    text = _replace_values(text, pairs)
    text = _URL_USERINFO.sub(_url_userinfo, text)
    text = _AUTH_HEADER.sub(_auth_header, text)
    text = _BEARER.sub(r"\1 <redacted:bearer>", text)
    text = _HF_TOKEN.sub("<redacted:hf-token>", text)
    text = _AWS_KEY_ID.sub("<redacted:aws-key-id>", text)
    lowered = text.lower()
    if any(hint in lowered for hint in _KEY_HINTS):
        text = _PAIR.sub(_pair, text)
        text = _FLAG.sub(_flag, text)
    return _drop_survivors(text, [value for value, _ in pairs])


def redact_values(text: str, secret_values: Secrets) -> str:
    """`text` with the given secret values (in every spelling `redact` knows) replaced, and
    nothing else: for text whose other words are not prose, such as a file's name."""
    pairs = _spellings(secret_values)
    return _drop_survivors(_replace_values(text, pairs), [value for value, _ in pairs])


def without_userinfo(url: str) -> str:
    """`url` without its userinfo (`user:token@`), as git shows a remote; anything that is
    not a `scheme://` URL (an scp-like host:path, a path) as it is."""
    return _LEADING_USERINFO.sub(r"\1", url)


@functools.lru_cache(maxsize=4096)  # evidence files repeat the same few keys thousands of times
def is_sensitive_key(key: str) -> bool:
    """Whether a `key=value` key names a credential (`HF_TOKEN`, `apiKey`, `--api-key`)."""
    words = [w for w in re.split(r"[_.\-]+", _CAMEL.sub("_", key).lower()) if w]
    if not words or words[-1] in _HARMLESS_LAST:
        return False
    if any(word in _KEY_WORDS for word in words):
        return True
    return any(pair in _KEY_PAIRS for pair in itertools.pairwise(words))


def _spellings(secret_values: Secrets) -> list[tuple[str, str]]:
    """(spelling, placeholder) pairs, longest spelling first so a longer secret wins."""
    if isinstance(secret_values, str):
        raise TypeError("secret_values must be a mapping or a sequence of strings, not a str")
    named: list[tuple[str | None, str]] = (
        list(secret_values.items())
        if isinstance(secret_values, Mapping)
        else [(None, value) for value in secret_values]
    )
    found: dict[str, str] = {}
    for name, value in named:
        holder = f"<redacted:{name}>" if name else "<redacted>"
        # A value read from a file often carries a newline; a JSON file holds it escaped.
        for spelling in (value, value.strip(), json.dumps(value)[1:-1]):
            if len(spelling) >= MIN_SECRET_LEN:
                found.setdefault(spelling, holder)
    return sorted(found.items(), key=lambda pair: -len(pair[0]))


def _replace_values(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    # Longest first: a secret that contains another is replaced whole, under its own name.
    for value, holder in pairs:
        text = text.replace(value, holder)
    return text


def _drop_survivors(text: str, values: Sequence[str]) -> str:
    """Delete what a placeholder plus its neighbours might have spelled again (pathological)."""
    while values and any(value in text for value in values):
        for value in values:
            text = text.replace(value, "")
    return text


def _url_userinfo(match: re.Match[str]) -> str:
    scheme, user, password = match[1], match[2], match[3]
    if user.startswith("<redacted"):  # already redacted (its `:` is not a password's)
        return match[0]
    if password is None:
        return f"{scheme}<redacted:user>@"
    return f"{scheme}{user}:<redacted:password>@"


def _auth_header(match: re.Match[str]) -> str:
    if match[3].startswith("<redacted"):
        return match[0]
    scheme = f"{match[2]} " if match[2] else ""
    return f"{match[1]}{scheme}<redacted:authorization>"


def _pair(match: re.Match[str]) -> str:
    key, value = match["key"], match["value"]
    head = match[0][: match.start("value") - match.start()]
    if not is_sensitive_key(key):
        # The value may itself hold a pair: `url: http://h/?token=abc` (no separator, no pair).
        return head + (_PAIR.sub(_pair, value) if ":" in value or "=" in value else value)
    if ":" in match["sep"] and not match["q"] and _PROSE_WORD.fullmatch(value):
        return match[0]
    return head + _placeholder(value, quoted_key=bool(match["q"]))


def _flag(match: re.Match[str]) -> str:
    if not is_sensitive_key(match["key"]):
        return match[0]
    return f"{match['key']}{match['sep']}<redacted>"


def _placeholder(value: str, *, quoted_key: bool) -> str:
    if value.startswith("["):  # `'api_key': ['k1', 'k2']`
        return value if "<redacted" in value or not value[1:-1].strip() else "[<redacted>]"
    quote = value[0] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else ""
    inner = value[1:-1] if quote else value
    if inner.startswith("<redacted") or inner.lower() in _LITERALS:
        return value
    if not quote and quoted_key:
        quote = '"'  # `"password": 1234` stays valid JSON as `"password": "<redacted>"`
    return f"{quote}<redacted>{quote}"


def secrets_in_file(path: Path, secret_values: Mapping[str, str]) -> list[str]:
    """The names of the secrets whose value (in any spelling `redact` knows) is in the file.

    For files that are uploaded as they are or not at all (a cache's, a boot's patches): a JIT
    log that echoed a token must not leave the host. Read through a memory map, so a large
    `.so` costs a scan of its pages and no copy.
    """
    if not secret_values:
        return []
    with path.open("rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return []
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return secrets_in_bytes(data, secret_values)


def secrets_in_bytes(data: bytes | mmap.mmap, secret_values: Mapping[str, str]) -> list[str]:
    """The names of the secrets whose value (in any spelling `redact` knows) is in `data`."""
    needles = {
        spelling.encode(): holder[len(_MARK) : -1]
        for spelling, holder in _spellings(secret_values)
        if holder.startswith(_MARK)
    }
    return sorted({name for needle, name in needles.items() if data.find(needle) >= 0})


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
    values = _in_names(secrets)
    before = {inode: path for path, inode in masked_before if is_masked(path)}
    if not values and not before:  # nearly every scan: nothing to look for
        return masked
    walked = list(walked)
    values |= _found_again(walked, before)
    if not values:
        return masked
    ordered = _longest_first(values)
    # By depth: a dir's final mask is known before its children are looked at.
    by_depth = sorted((real for real, _ in walked), key=lambda real: (real.count("/"), real))
    for _, level in groupby(by_depth, key=lambda real: real.count("/")):
        named: dict[str, list[str]] = {}  # masked path -> real paths masked to it
        for real in level:
            parent, _, name = real.rpartition("/")
            parent = masked.get(parent, parent)
            name = _mask_name(name, ordered)
            named.setdefault(f"{parent}/{name}" if parent else name, []).append(real)
        for mask, reals in named.items():
            if len(reals) == 1 and reals[0] == mask:
                continue
            plain = mask in reals  # a real name that is spelled like the mask
            others = sorted(real for real in reals if real != mask)
            for number, real in enumerate(others, start=2 if plain else 1):
                masked[real] = mask if number == 1 else _numbered(mask, number)
    return masked


def mask_link(target: str, secrets: Mapping[str, str], masked_before: str | None = None) -> str:
    """A symlink's target as a fingerprint keeps it: each of the `secrets`' values replaced by
    its placeholder, as in a name. A target the previous scan masked (`masked_before`) that
    still fits that mask keeps it: a scan without the secrets finds the tree it recorded."""
    if masked_before and is_masked(masked_before) and _pattern(masked_before)[0].fullmatch(target):
        return masked_before
    values = _longest_first(_in_names(secrets))
    return "/".join(_mask_name(name, values) for name in target.split("/")) if values else target


def _in_names(secrets: Mapping[str, str]) -> set[tuple[str, str]]:
    """(secret, value) to look for in a name. A name never holds `/`: a value that does (a
    base64 token, an AWS secret key) can only be spread over dirs and names, so each of its
    parts is a value here. Parts shorter than MIN_SECRET_LEN are not looked for, as in text;
    a path-shaped value masks more names than it must (`home`): that withholds, never leaks."""
    return {(name, part) for name, value in secrets.items() for part in value.split("/") if part}


def _longest_first(values: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    # As redact does: a value holding another is replaced whole.
    return sorted(values, key=lambda pair: (-len(pair[1]), pair))


def _mask_name(name: str, ordered: Sequence[tuple[str, str]]) -> str:
    for secret, value in ordered:
        name = redact_values(name, {secret: value})
    return name


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
    each group `g<i>` holds: one group per placeholder, as one secret's placeholder stands for
    a different part of its value in each name when the value holds `/`."""
    parts: list[str] = []
    secrets: list[str] = []
    at = 0
    for match in PLACEHOLDER.finditer(masked_path):
        parts.append(re.escape(masked_path[at : match.start()]))
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
