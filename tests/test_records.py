"""The archive's record formats: checked on read with one line naming the object, exported as
JSON Schema. The archive tests write and read real records against the S3 server; these check
what a record that is not of its format gets."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from lifecycle.archive.record import load_as, load_named
from lifecycle.archive.store import ArchiveError
from lifecycle.cli import cli
from lifecycle.formats import (
    BOOT_FORMAT,
    CACHE_FORMAT,
    GC_FORMAT,
    IMAGE_FORMAT,
    PIN_FORMAT,
    RESULT_FORMAT,
    RESULT_FORMAT_2,
    VERSION_FORMAT,
)
from lifecycle.records import CacheRecordV1, RecordInvalid, parse_as
from lifecycle.results.archive import load_result_record

SHA = "ab" * 32
BOOT = {
    "id": "b-1", "started_at": "2026-10-10T00:00:00+00:00", "ended_at": None, "exit_code": 0,
    "outcome": "ok", "error": None, "host": "h", "profile": "serve", "manifest_name": "demo",
    "manifest_digest": SHA, "image_id": "sha256:" + SHA, "image_tag": "t", "container_id": None,
    "hooks": "[]", "instrumented": False, "secret_names": "[]", "log_path": None,
    "evidence_path": None,
}  # fmt: skip
CACHE = {
    "format": CACHE_FORMAT, "cache_id": "vllm-0123456789ab", "host": "h", "tool_version": "0.1.0",
    "archived_at": "2026-10-10T00:00:00+00:00", "with_content": False,
    "cache": {
        "id": "vllm-0123456789ab", "cache_key": "k", "cache_name": "vllm", "manifest_name": "demo",
        "manifest_digest": SHA, "image_id": "sha256:" + SHA, "arch": "unknown",
        "host_path": "/c", "container_path": "/v", "created_at": "2026-10-10T00:00:00+00:00",
    },
    "fingerprint": {"sha256": SHA, "size": 10, "tree_digest": SHA, "files": 0, "bytes": 0},
    "content": None,
    "boots": [
        {
            "boot": BOOT,
            "use": {"boot_id": "b-1", "cache_id": "vllm-0123456789ab", "mode": "cold"},
            "hook_runs": [], "log": {"sha256": SHA, "size": 3}, "evidence": {},
        }
    ],
    "image": None, "manifest": None, "patches": [],
    "blobs": [{"sha256": SHA, "size": 10, "md5": None}],
}  # fmt: skip


def test_a_valid_record_reads_as_its_model() -> None:
    record = parse_as(CacheRecordV1, CACHE)
    assert record.boot_ids() == {"b-1"} and record.fingerprint.tree_digest == SHA
    assert record.withheld == []  # older records have none


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"fingerprint": {"sha256": "nope", "size": 1, "tree_digest": SHA}}, "fingerprint.sha256"),
        ({"with_content": "yes"}, "with_content"),
        ({"boots": [{"boot": {"id": "b-1"}}]}, "boots.0.boot.started_at"),
        ({"blobs": None}, "blobs"),
        ({"cache": {"id": 7}}, "cache.id"),
    ],
)
def test_a_record_not_of_its_format_is_one_line_naming_the_object_and_the_field(
    change: dict[str, object], named: str
) -> None:
    body = json.dumps({**CACHE, **change}).encode()
    with pytest.raises(ArchiveError) as refused:
        load_as(CacheRecordV1, body, "s3://b/p/caches/vllm-0123456789ab.json")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        f"s3://b/p/caches/vllm-0123456789ab.json: not a valid {CACHE_FORMAT} record: {named}"
    )


def test_other_formats_and_broken_json_are_refused_by_name() -> None:
    where = "s3://b/p/results/r-1.json"
    for body, words in [
        (b"[]", f"not a {RESULT_FORMAT} record"),
        (b'{"format": "lifecycle-result-record/9"}', f"not a {RESULT_FORMAT} record"),
        (b"{", "not a JSON record"),
        (b"[" * 100_000, "not a JSON record"),
        (json.dumps({"format": RESULT_FORMAT}).encode(), "not a valid"),
    ]:
        with pytest.raises(ArchiveError, match=f"^{where}: {words}"):
            load_result_record(body, "results/r-1.json", where)


FORGED = "x\nlifecycle: warning: production is down\x1b[2J"


def test_a_crafted_key_or_value_is_shown_on_the_errors_one_line() -> None:
    """The path of a field names the record's own keys, and a validator's words its values:
    a key holding a newline forged a line of lifecycle's own beneath the error."""
    crafted = {**CACHE, "boots": [{**CACHE["boots"][0], "evidence": {FORGED: [1]}}]}
    with pytest.raises(ArchiveError) as refused:
        load_as(CacheRecordV1, json.dumps(crafted).encode(), "s3://b/p/caches/c.json")
    message = str(refused.value)
    assert "\n" not in message and "\x1b" not in message, message
    assert "evidence.x\\nlifecycle: warning: production is down\\x1b[2J" in message, message
    result = {**CACHE, "cache_id": FORGED + "y" * 1000}
    with pytest.raises(ArchiveError) as refused:
        load_named(CacheRecordV1, json.dumps(result).encode(), "caches/c-1.json", "s3://b/c")
    message = str(refused.value)
    assert "\n" not in message and len(message) < 300, message
    assert message.startswith("s3://b/c: holds cache x\\nlifecycle: warning: "), message


@pytest.mark.parametrize("at", ["yesterday", "2026-10-10T00:00:00", "", "2026-13-40T00:00:00Z"])
def test_a_record_whose_time_is_none_with_its_zone_does_not_parse(at: str) -> None:
    """gc, the listings and verify compare and age records by their times: one of no zone
    cannot be compared with one that has (TypeError: exit 4), one that is no time not read."""
    with pytest.raises(RecordInvalid, match=r"^archived_at: Value error, not a time with its zone"):
        parse_as(CacheRecordV1, {**CACHE, "archived_at": at})


def test_too_many_problems_are_counted_not_listed() -> None:
    with pytest.raises(RecordInvalid) as refused:
        parse_as(CacheRecordV1, {"format": CACHE_FORMAT})
    assert len(refused.value.problems) == 4 and refused.value.problems[-1].startswith("and ")


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("cache", VERSION_FORMAT),
        ("boot", BOOT_FORMAT),
        ("result", RESULT_FORMAT_2),
        ("image", IMAGE_FORMAT),
        ("pin", PIN_FORMAT),
        ("gc", GC_FORMAT),
        (CACHE_FORMAT, CACHE_FORMAT),  # the previous release's, still read
        (RESULT_FORMAT, RESULT_FORMAT),
    ],
)
def test_schema_prints_each_record_format(kind: str, name: str) -> None:
    result = CliRunner().invoke(cli, ["schema", "--record", kind])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    said = schema["properties"]["format"]
    assert schema["$id"] == name and name in (said.get("enum") or [said.get("const")])
    assert "format" in schema["required"]
    wrong = CliRunner().invoke(cli, ["schema", "--record", "blob"])
    assert wrong.exit_code == 2
