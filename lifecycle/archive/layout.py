"""Where each object of the archive lives under `s3://BUCKET/PREFIX/` (the table:
docs/bucket.md, "Append-only archive"), and what a key says.

Keys here are relative to the prefix; records name each other by these relative keys, so an
archive copied under another prefix or bucket still reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from lifecycle.errors import LifecycleError

_SHA = "[0-9a-f]{64}"
_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# Each read whole (fullmatch): a key with a trailing newline is not ours.
_PATTERNS = {
    "blob": re.compile(rf"blobs/sha256/[0-9a-f]{{2}}/(?P<sha>{_SHA})"),
    "pack": re.compile(rf"packs/sha256/[0-9a-f]{{2}}/(?P<sha>{_SHA})"),
    "version": re.compile(
        rf"caches/(?P<id>{_ID})/versions/(?P<tree>{_SHA})\.(?P<sha>{_SHA})\.json"
    ),
    "boot-marker": re.compile(rf"caches/(?P<id>{_ID})/boots/(?P<other>{_ID})"),
    "result-marker": re.compile(rf"caches/(?P<id>{_ID})/results/(?P<other>{_ID})"),
    "boot": re.compile(rf"boots/(?P<id>{_ID})/(?P<sha>{_SHA})\.json"),
    "result": re.compile(rf"results/(?P<id>{_ID})/(?P<sha>{_SHA})\.json"),
    "image": re.compile(rf"images/(?P<id>{_SHA})/(?P<sha>{_SHA})\.json"),
    "pin": re.compile(rf"pins/(?P<id>{_ID})/(?P<sha>{_SHA})\.json"),
    "gc": re.compile(rf"gc/(?P<id>{_ID})/(?P<sha>{_SHA})\.json"),
    "gc-intent": re.compile(rf"gc-intents/(?P<id>{_ID})/(?P<sha>{_SHA})\.json"),
    "legacy-cache": re.compile(rf"caches/(?P<id>{_ID})\.json"),
    "legacy-result": re.compile(rf"results/(?P<id>{_ID})\.json"),
    "legacy-marker": re.compile(rf"results-by-cache/(?P<id>{_ID})/(?P<other>{_ID})"),
}
KINDS = tuple(_PATTERNS)
# A result's records and a cache's versions, as the layout names them (the previous release's
# too): what a result or a cache given by its id can be, there or in what a gc collected.
RESULT_KINDS = frozenset({"result", "legacy-result"})
CACHE_KINDS = frozenset({"version", "legacy-cache"})
_OWNER = re.compile(_ID)
Records = Literal[
    "boots", "results", "images", "pins", "gc", "gc-intents"
]  # records listed by their owner


@dataclass(frozen=True)
class Key:
    """What a key of the archive's layout names."""

    key: str  # relative to the prefix
    kind: str  # one of KINDS
    id: str  # the cache, boot, result or manifest digest it belongs to (a blob: its sha256)
    sha256: str | None = None  # of the object's bytes, where the key says
    tree: str | None = None  # a version's tree digest
    other: str | None = None  # a marker's boot or result


def parse_key(key: str) -> Key | None:
    """The layout's reading of a relative key; None for a key that is not ours."""
    for kind, pattern in _PATTERNS.items():
        match = pattern.fullmatch(key)
        if match:
            found = match.groupdict()
            ident = found.get("id") or found["sha"]
            return Key(key, kind, ident, found.get("sha"), found.get("tree"), found.get("other"))
    return None


def blob_key(sha256: str) -> str:
    """`blobs/sha256/ab/<sha256>`."""
    return f"blobs/sha256/{sha256[:2]}/{sha256}"


def pack_key(sha256: str) -> str:
    """`packs/sha256/ab/<sha256>`."""
    return f"packs/sha256/{sha256[:2]}/{sha256}"


def version_key(cache_id: str, tree_digest: str, sha256: str) -> str:
    """`caches/<cache>/versions/<tree>.<sha256>.json`."""
    return f"caches/{cache_id}/versions/{tree_digest}.{sha256}.json"


def short_key(key: str) -> str:
    """A key as a person reads it: each sha256 digest cut to 12 digits (a version's key holds
    two, 129 characters of a table's line)."""
    return re.sub(r"\b([0-9a-f]{12})[0-9a-f]{52}(\.[0-9a-f]{64})?\b", r"\1…", key)


def check_id(ident: str, what: str) -> None:
    """Refuse, before any request, an id no key of the layout holds (a `/`, a leading `.`,
    `..`): it names nothing archived, and put into a key it points outside its place."""
    if not _OWNER.fullmatch(ident):
        raise LifecycleError(
            f"{ident!r} is not a {what} id (letters, digits, '.', '_' and '-', as archived)"
        )


def cache_prefix(cache_id: str, part: str = "") -> str:
    """A cache's whole index (its versions, its boots, its results), or one `part` of it."""
    return f"caches/{cache_id}/{part}"


def marker(cache_id: str, kind: Literal["boots", "results"], other: str) -> str:
    """`caches/<cache>/boots/<boot>` or `caches/<cache>/results/<result>`: an object saying
    that boot used the cache, or that result stands on it (its body: `marker_body`)."""
    return cache_prefix(cache_id, f"{kind}/{other}")


def marker_body(other: str) -> bytes:
    """What a marker holds: the boot or result its key names, and a newline.

    Its key is the fact; the body is not empty because SeaweedFS (4.48) answers an empty PUT
    with a response its client reads one too many of: the next request on that connection then
    waits out its read timeout (20 s measured) and is retried. Markers written by the previous
    release are empty, and read the same (only their keys are read).
    """
    return f"{other}\n".encode()


def records_of(kind: Records, owner: str) -> str:
    """Where the records of one boot, result, manifest (its pushed images), pinned result or
    gc run are listed: `<kind>/<owner>/`."""
    return f"{kind}/{owner}/"


def record_key(kind: Records, owner: str, sha256: str) -> str:
    """`<kind>/<owner>/<sha256>.json`: one of its records, named by its bytes."""
    return f"{records_of(kind, owner)}{sha256}.json"


def legacy_cache_key(cache_id: str) -> str:
    """The previous release's `caches/<cache>.json`."""
    return f"caches/{cache_id}.json"


def legacy_result_key(result_id: str) -> str:
    """The previous release's `results/<result>.json`."""
    return f"results/{result_id}.json"


def legacy_marker_prefix(cache_id: str) -> str:
    """The previous release's `results-by-cache/<cache>/`."""
    return f"results-by-cache/{cache_id}/"
