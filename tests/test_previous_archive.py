"""An archive the previous release wrote (tests/data/previous_archive: one mutable record per
cache and per result, `results-by-cache/` markers), uploaded as it was and read by this release
on a host that never saw it: the team views list it, audit and verify follow its chain, its
caches restore to their exact trees and grow new versions naming them, and gc keeps it whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lifecycle.fingerprint import scan
from lifecycle.formats import CACHE_FORMAT
from tests.archive_support import keys
from tests.services import PREVIOUS_ARCHIVE, PREVIOUS_RESULT, ArchiveTarget, run_lifecycle

pytestmark = pytest.mark.s3

OBJECTS = PREVIOUS_ARCHIVE
RESULT = PREVIOUS_RESULT


def _json(target: ArchiveTarget, home: Path, *args: str) -> Any:
    env = {**target.env, "LIFECYCLE_HOME": str(home)}
    result = run_lifecycle(home.parent, *args, "--json", env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_previous_releases_archive_reads_restores_and_grows(
    previous_archive: ArchiveTarget, tmp_path: Path
) -> None:
    previous = previous_archive
    url, home = previous.url, tmp_path / "home"
    legacy = {
        path.stem: json.loads(path.read_bytes()) for path in (OBJECTS / "caches").glob("*.json")
    }
    assert {record["format"] for record in legacy.values()} == {CACHE_FORMAT}

    caches = {c["id"]: c for c in _json(previous, home, "caches", "--from", url)["caches"]}
    assert set(caches) == set(legacy)
    for cache_id, cache in caches.items():
        assert cache["state"] == "restorable" and cache["results"] == [RESULT]
        [version] = cache["versions"]
        assert version["tree_digest"] == legacy[cache_id]["fingerprint"]["tree_digest"]
    [listed] = _json(previous, home, "results", "--from", url)["results"]
    assert listed["id"] == RESULT and listed["status"] == "pass"

    chain = _json(previous, home, "audit", "result", RESULT, "--from", url)
    assert chain["warnings"] == [] and chain["result"]["metrics"] == {"tokens_per_s": 41.5}
    assert {c["id"]: c["tree_digest"] for c in chain["caches"]} == {
        cache_id: record["fingerprint"]["tree_digest"] for cache_id, record in legacy.items()
    }
    checked = _json(previous, home, "verify", RESULT, "--from", url)
    assert checked["ok"], checked["problems"]
    for cache_id in legacy:  # a cache by its previous-format record alone
        checked = _json(previous, home, "verify", cache_id, "--from", url)
        assert checked["ok"] and checked["kind"] == "cache", checked["problems"]
        assert f"{url}/caches/{cache_id}.json" in {c["subject"] for c in checked["checked"]}

    # Restored by the tree the old result stood on, then grown and archived by this release:
    # a new version, named by its bytes, whose parent is the previous release's tree.
    cache_id = sorted(legacy)[0]
    tree = legacy[cache_id]["fingerprint"]["tree_digest"]
    restored = _json(previous, home, "restore", f"{cache_id}@{tree[:12]}", "--from", url)
    assert scan(Path(restored["host_path"])).tree_digest == tree
    (Path(restored["host_path"]) / "grown-here.o").write_bytes(b"compiled on this release\n")
    before = set(keys(previous.client, previous.bucket, f"{previous.prefix}/"))
    _json(previous, home, "archive", cache_id, "--with-content", "--to", url)
    after = set(keys(previous.client, previous.bucket, f"{previous.prefix}/"))
    assert before <= after  # the old records stay as they were; nothing rewritten
    [grown] = [
        c for c in _json(previous, home, "caches", "--from", url)["caches"] if c["id"] == cache_id
    ]
    assert [(v["tree_digest"] == tree, v["parent"]) for v in grown["versions"]] == [
        (True, None),
        (False, tree),
    ], grown["versions"]

    # gc with no policy keeps every record of either format and every blob they name.
    planned = _json(previous, home, "gc", "--remote", "--from", url, "--grace", "0s", "--dry-run")
    assert planned["plan"]["objects"] == []


def test_verify_from_the_archive_finds_a_tree_in_a_previous_format_record(
    previous_archive: ArchiveTarget, tmp_path: Path
) -> None:
    """`verify CACHE@TREE --from` looked for the tree among the cache's versions alone, so the
    tree of a cache the previous release archived (its one record, the tree in its
    fingerprint) was "none archived there", which `restore CACHE@TREE` restores."""
    url, home = previous_archive.url, tmp_path / "home"
    for path in sorted((OBJECTS / "caches").glob("*.json")):
        tree = json.loads(path.read_bytes())["fingerprint"]["tree_digest"]
        checked = _json(previous_archive, home, "verify", f"{path.stem}@{tree[:12]}", "--from", url)
        assert checked["ok"] and checked["kind"] == "cache", checked
        assert next(c["subject"] for c in checked["checked"]) == f"{url}/caches/{path.name}"
