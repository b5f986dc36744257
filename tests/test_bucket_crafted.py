"""Every reader of a shared bucket, against records anyone who can write to it could plant:
wrong types, huge fields, a newline and terminal escapes in every string field and in keys,
ids naming other objects, truncated JSON, a record of a newer format. Each reader answers by
the exit-code contract, with no traceback, and every line it prints is its own (a field's
newline escaped); gc removes nothing for a crafted record that it would keep without it. The
records are written to the real S3 server by hand, beside a real archive."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lifecycle.formats import GC_FORMAT, IMAGE_FORMAT, PIN_FORMAT
from tests.archive_support import keys, read_json
from tests.services import boot_demo, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]

FORGED = "lifecycle: warning: FORGED"
HOSTILE = f"x\n{FORGED}\x1b[2J\x9b2J\u202e\r"
HUGE = "h" * 1_000_000
PREFIX = "test"
Document = dict[str, Any]
Mutation = Callable[[Document], Document | bytes]


def _archived(project: Path) -> tuple[str, str]:
    """A cold and a warm boot, a result of the warm one, all archived with content: (boot,
    result)."""
    boot_demo(project, "--cold")
    booted = boot_demo(project)
    added = run_lifecycle(
        project, "result", "add", booted["id"], "--name", "smoke", "--status", "pass",
        "--metric", "tokens_per_s=41.5", "--json",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    done = run_lifecycle(project, "archive", "--all", "--with-content")
    assert done.exit_code == 0, done.output
    return booted["id"], json.loads(added.stdout)["id"]


def _is_digest(value: str) -> bool:
    tail = value.removeprefix("sha256:")
    return len(tail) == 64 and all(c in "0123456789abcdef" for c in tail)


def _walk(value: Any, leaf: Callable[[str], Any], key: Callable[[str], str]) -> Any:
    if isinstance(value, dict):
        return {key(k): _walk(v, leaf, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, leaf, key) for v in value]
    return leaf(value) if isinstance(value, str) else value


_KEPT = {"format", "archived_at", "pushed_at", "pinned_at", "removed_at", "created_at"}


def hostile_fields(document: Document) -> Document:
    """Every string but a digest, a format and a time with HOSTILE after it (the ids its key
    names too: the record is then not the one its key names)."""

    def leaf(value: str) -> str:
        return value if _is_digest(value) else value + HOSTILE

    return {k: v if k in _KEPT else _walk(v, leaf, str) for k, v in document.items()}


def hostile_values(document: Document) -> Document:
    """Every string that is not a digest, a format, a time or an id its key names, with
    HOSTILE after it: a record that may still parse, its fields shown."""
    ids = {"cache_id", "boot_id", "result_id", "run_id", "target", "manifest_digest", "id"}
    found = {k: document[k] if k in ids else v for k, v in hostile_fields(document).items()}
    if "result" in document:  # its digest covers it: its note and name, shown by audit
        found["result"] = document["result"] | {"note": HOSTILE, "name": f"smoke{HOSTILE}"}
    return found


def hostile_keys(document: Document) -> Document:
    """A key holding HOSTILE in every map, its value of the wrong type."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {**{k: walk(v) for k, v in value.items()}, HOSTILE: [1]}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {k: walk(v) if isinstance(v, dict) else v for k, v in document.items()}


def wrong_types(document: Document) -> Document:
    """Each field of another JSON type than its own."""
    other: dict[type, Any] = {str: [HOSTILE], list: {HOSTILE: HOSTILE}, dict: HOSTILE}
    return {k: v if k == "format" else other.get(type(v), HOSTILE) for k, v in document.items()}


def huge(document: Document) -> Document:
    """Every string field of the record a megabyte long."""
    return {k: HUGE if isinstance(v, str) and k != "format" else v for k, v in document.items()}


def newer(document: Document) -> Document:
    """The record of a format this release does not know."""
    return {**document, "format": document["format"].rsplit("/", 1)[0] + "/99", "new": HOSTILE}


def _times(document: Document, time: Callable[[str], str]) -> Document:
    """Every field named `*_at`, at any depth, as `time` makes it of its value."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: time(v) if k.endswith("_at") and isinstance(v, str) else walk(v)
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return dict(walk(document))


def odd_times(document: Document) -> Document:
    """Every time no time at all."""
    return _times(document, lambda _: f"yesterday{HOSTILE}")


def naive_times(document: Document) -> Document:
    """Every time without its zone (and one as far in the future as a time goes)."""
    return _times(document, lambda at: at[:19] if at[:4] != "9999" else at) | (
        {"archived_at": "9999-12-31T23:59:59"} if "archived_at" in document else {}
    )


def truncated(document: Document) -> bytes:
    return json.dumps(document).encode()[:200]


MUTATIONS: dict[str, Mutation] = {
    "hostile-fields": hostile_fields,
    "hostile-values": hostile_values,
    "hostile-keys": hostile_keys,
    "wrong-types": wrong_types,
    "huge": huge,
    "newer": newer,
    "odd-times": odd_times,
    "naive-times": naive_times,
    "truncated": truncated,
}


def _planted(client: Any, bucket: str, where: str, body: bytes) -> str:
    """Put `body` under `where` (a key with `{sha}` for its sha256, named by its bytes)."""
    key = where.format(sha=hashlib.sha256(body).hexdigest())
    client.put_object(Bucket=bucket, Key=key, Body=body)
    return key


def _body(made: Document | bytes) -> bytes:
    return made if isinstance(made, bytes) else json.dumps(made).encode()


def _genuine(client: Any, bucket: str, boot: str, result: str) -> dict[str, tuple[str, Document]]:
    """Where each kind of record lives (its key with `{sha}`) -> a genuine record of it: the
    archive's own, or one made as lifecycle makes it."""
    [boot_key] = keys(client, bucket, f"{PREFIX}/boots/{boot}/")
    [result_key] = keys(client, bucket, f"{PREFIX}/results/{result}/")
    version_keys = keys(client, bucket, f"{PREFIX}/caches/")
    version_key = next(k for k in version_keys if "/versions/" in k)
    cache, tree = version_key.split("/")[2], version_key.split("/")[4].split(".")[0]
    record = read_json(client, bucket, result_key)
    digest = record["manifest_digest"]
    at = "2026-01-01T00:00:00+00:00"
    pin = {"format": PIN_FORMAT, "target": result, "reason": "kept", "host": "h", "pinned_at": at}
    image = {
        "format": IMAGE_FORMAT, "manifest_digest": digest, "image_id": "sha256:" + "ab" * 32,
        "reference": f"127.0.0.1:9/demo@sha256:{'e' * 64}", "tag": "127.0.0.1:9/demo:0.2",
        "labels": {"a": "b"}, "host": "h", "tool_version": "0", "pushed_at": at,
    }  # fmt: skip
    gc = {
        "format": GC_FORMAT, "run_id": "g-crafted", "host": "h", "tool_version": "0",
        "policy": "keep", "removed_at": at, "rules": {"result": "old"},
        "removed": {"result": [result_key.removeprefix(f"{PREFIX}/")]},
    }  # fmt: skip
    return {
        f"{PREFIX}/boots/{boot}/{{sha}}.json": read_json(client, bucket, boot_key),
        f"{PREFIX}/results/{result}/{{sha}}.json": record,
        f"{PREFIX}/caches/{cache}/versions/{tree}.{{sha}}.json": read_json(
            client, bucket, version_key
        ),
        f"{PREFIX}/pins/{result}/{{sha}}.json": pin,
        f"{PREFIX}/images/{digest}/{{sha}}.json": image,
        f"{PREFIX}/gc/g-crafted/{{sha}}.json": gc,
        f"{PREFIX}/gc-intents/g-crafted/{{sha}}.json": gc,
    }


def _readers(result: str, cache: str, tree: str, url: str) -> list[list[str]]:
    return [
        ["audit", "result", result, "--from", url],
        ["audit", "cache", cache, "--from", url],
        ["boots", "--from", url],
        ["caches", "--from", url],
        ["results", "--from", url],
        ["verify", result, "--from", url],
        ["verify", cache, "--from", url],
        ["verify", f"{cache}@{tree[:12]}", "--from", url],
        ["verify", result],
        ["verify", cache],
        ["gc", "--remote", "--from", url, "--dry-run", "--grace", "0s", "--keep-last", "1"],
        ["pin", result, "--reason", "kept by the test"],
        ["unpin", result, "--reason", "kept by the test"],
    ]


def assert_own_lines(args: list[str], result: Any, codes: set[int]) -> None:
    """The contract: an exit code it allows, no traceback, every line lifecycle's own."""
    said = f"{args}: exit {result.exit_code}\n{result.stdout[:3000]}\n{result.stderr[:3000]}"
    assert result.exit_code in codes, said
    text = result.stdout + result.stderr
    assert "Traceback" not in text and "unexpected error" not in text, said
    for line in text.splitlines():
        assert not line.startswith(FORGED), said
        assert len(line) < 20_000, f"{args}: a line of {len(line)} characters"
    for acted_on in ("\x1b", "\x9b", "\u202e", "\r"):
        assert acted_on not in text, said


def test_every_reader_keeps_its_contract_against_crafted_records(
    archive_project: Path, s3_bucket: str, s3_client: Any, tmp_path: Path
) -> None:
    """Each family of crafted records planted beside a real archive, every reader run, the
    family taken away; then all of them at once, and gc run for real."""
    boot, result = _archived(archive_project)
    url = f"s3://{s3_bucket}/{PREFIX}"
    genuine = _genuine(s3_client, s3_bucket, boot, result)
    version = next(k for k in genuine if "/versions/" in k)
    cache, tree = version.split("/")[2], version.split("/")[4].split(".")[0]
    gc = ["gc", "--remote", "--from", url, "--grace", "0s", "--older-than", "0s", "--json"]
    before = run_lifecycle(archive_project, *gc, "--dry-run")
    assert before.exit_code == 0, before.output
    removed = {f"{PREFIX}/{key}" for key in json.loads(before.stdout)["plan"]["objects"]}
    assert removed, before.stdout  # the old versions: else gc's check below proves nothing
    kept = set(keys(s3_client, s3_bucket, f"{PREFIX}/")) - removed
    elsewhere = {"LIFECYCLE_HOME": str(tmp_path / "elsewhere")}
    readers = _readers(result, cache, tree, url)
    for name, mutation in sorted(MUTATIONS.items()):
        these = {
            _planted(s3_client, s3_bucket, where, _body(mutation(document)))
            for where, document in genuine.items()
        }
        for args in readers:
            assert_own_lines([name, *args], run_lifecycle(archive_project, *args), {0, 1, 2})
        restored = run_lifecycle(archive_project, "restore", cache, "--from", url, env=elsewhere)
        assert_own_lines([name, "restore"], restored, {0, 1, 2})
        for key in these:
            s3_client.delete_object(Bucket=s3_bucket, Key=key)

    # Every family at once, but pins: a pin, read or not, keeps its result (more, never less).
    for mutation in MUTATIONS.values():
        for where, document in genuine.items():
            if "/pins/" not in where:
                _planted(s3_client, s3_bucket, where, _body(mutation(document)))
    swept = run_lifecycle(archive_project, *gc, "--yes")
    assert_own_lines(["gc"], swept, {0, 1, 2})
    left = set(keys(s3_client, s3_bucket, f"{PREFIX}/"))
    assert kept <= left, sorted(kept - left)


# --- a gc intent that cannot be read: a sweep's (torn, of a newer format) or a crafted one ---


def _unreadable_intent(client: Any, bucket: str, run: str) -> str:
    """A gc intent, as a sweep writes it now, that does not parse: its s3:// URL."""
    body = b'{"format": "lifecycle-gc-record/1", "run_id": "' + run.encode() + b'", "remo'
    return f"s3://{bucket}/" + _planted(
        client, bucket, f"{PREFIX}/gc-intents/{run}/{{sha}}.json", body
    )


def test_pin_says_it_pinned_then_warns_of_a_gc_intent_it_cannot_read(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """One unreadable intent made every `pin RESULT` exit 1 naming it, the pin written for
    the team and not said, and not made on this host. The pin is made, said, then the
    warning: the intent may be a sweep's removing what the result stands on."""
    _, result = _archived(archive_project)
    intent = _unreadable_intent(s3_client, s3_bucket, "g-torn")
    pinned = run_lifecycle(archive_project, "pin", result, "--reason", "kept by the test")
    assert_own_lines(["pin"], pinned, {0})
    lines = pinned.stdout.splitlines()
    assert any(line.startswith(f"pinned for the team at s3://{s3_bucket}/") for line in lines)
    assert [line for line in lines if line.startswith("pinned ") and "kept by the test" in line]
    [warning] = [line for line in pinned.stderr.splitlines() if line.startswith("warning: ")]
    assert f"a gc intent at this location cannot be read: {intent}: " in warning, warning
    assert f"lifecycle verify {result} --from s3://{s3_bucket}/{PREFIX}` after" in warning
    said = json.loads(run_lifecycle(archive_project, "pin", result, "--json").stdout)
    assert said["team"] and [w for w in said["warnings"] if intent in w], said


def test_teardown_keeps_only_the_caches_an_unreadable_gc_intent_may_concern(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """One unreadable intent kept every archived cache of every host, each said as an archive
    that does not verify. It may list anything stored before it, so a cache whose archive
    relies on such an object is kept, the intent named; one whose objects all came after it
    goes: the sweep planned before its intent."""
    earlier = _unreadable_intent(s3_client, s3_bucket, "g-earlier")
    _archived(archive_project)
    torn = run_lifecycle(archive_project, "teardown", "--yes", "--json")
    assert_own_lines(["teardown"], torn, {0})
    listed = json.loads(run_lifecycle(archive_project, "caches", "--json").stdout)["caches"]
    assert listed and {c["state"] for c in listed} == {"torn-down"}, listed

    boot_demo(archive_project, "--cold")  # the same files: the objects stored before `later`
    done = run_lifecycle(archive_project, "archive", "--all", "--with-content")
    assert done.exit_code == 0, done.output
    later = _unreadable_intent(s3_client, s3_bucket, "g-later")
    kept = run_lifecycle(archive_project, "teardown", "--yes")
    assert_own_lines(["teardown"], kept, {1})
    said = [line for line in kept.output.splitlines() if "cannot be read" in line]
    assert said and all(later in line and earlier not in line for line in said), kept.output
    assert all("teardown again after" in line for line in said), said
    s3_client.delete_object(Bucket=s3_bucket, Key=later.removeprefix(f"s3://{s3_bucket}/"))
    torn = run_lifecycle(archive_project, "teardown", "--yes")
    assert_own_lines(["teardown"], torn, {0})


def test_a_result_marker_whose_name_is_no_id_names_nothing(
    archive_project: Path, s3_bucket: str, s3_client: Any
) -> None:
    """A marker under a cache whose name no key of the layout holds (a newline and escapes in
    it) was taken for a result standing on the cache, and the record at `results/<name>.json`
    believed for it (no key of the layout, so checked against nothing): a copy of another
    result's record counted twice in `audit cache`. Such a name is not the layout's: left
    alone, as every listing leaves such keys."""
    _, result = _archived(archive_project)
    [record] = keys(s3_client, s3_bucket, f"{PREFIX}/results/{result}/")
    body = s3_client.get_object(Bucket=s3_bucket, Key=record)["Body"].read()
    markers = keys(s3_client, s3_bucket, f"{PREFIX}/caches/")
    cache = next(k for k in markers if k.endswith(f"/results/{result}")).split("/")[2]
    odd = f"r-odd{HOSTILE}"
    for key, planted in ((f"caches/{cache}/results/{odd}", b"x"), (f"results/{odd}.json", body)):
        s3_client.put_object(Bucket=s3_bucket, Key=f"{PREFIX}/{key}", Body=planted)
    url = f"s3://{s3_bucket}/{PREFIX}"
    for args in (["audit", "cache", cache, "--from", url], ["verify", cache, "--from", url]):
        assert_own_lines(args, run_lifecycle(archive_project, *args), {0})
    audited = run_lifecycle(archive_project, "audit", "cache", cache, "--from", url, "--json")
    results = json.loads(audited.stdout)["results"]
    assert [r["id"] for r in results] == [result], results
