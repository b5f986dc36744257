"""`lifecycle archive` against a real S3 server (SeaweedFS, or AWS with LIFECYCLE_TEST_S3_BUCKET):
content addressing, verification, faults, dry run, secrets. Caches come from real demo boots."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import boto3
import pytest

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.run import archive_caches
from lifecycle.archive.store import ArchiveError, BlobRef, BlobStore, KeyOf, b64_sha256
from lifecycle.formats import BOOT_FORMAT, VERSION_FORMAT
from lifecycle.home import Home
from lifecycle.leases import try_lease
from lifecycle.ledger import Ledger
from tests.archive_support import boot_records, newest_version, verify_key
from tests.cache_support import adopt
from tests.services import ArchiveTarget, WeedServer, boot_demo, run_lifecycle

pytestmark = [pytest.mark.docker, pytest.mark.s3]


def _home() -> Path:
    return Path(os.environ["LIFECYCLE_HOME"])


@pytest.fixture(autouse=True)
def one_object_per_blob(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count and inspect objects blob by blob: no cache file is packed here, so
    they pin the single-object path (large files, evidence, archives of the previous
    release); tests/test_archive_packs.py covers the packs."""
    from lifecycle.archive import packs

    monkeypatch.setattr(packs, "PACK_BLOB_MAX", -1)


def _archive(project: Path, target: ArchiveTarget, *args: str) -> dict[str, Any]:
    result = run_lifecycle(project, "archive", "--to", target.url, "--json", *args, env=target.env)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _caches(project: Path) -> dict[str, dict[str, Any]]:
    rows = json.loads(run_lifecycle(project, "caches", "--json").stdout)["caches"]
    return {row["id"]: row for row in rows}


def _record(target: ArchiveTarget, cache_id: str) -> dict[str, Any]:
    """The cache's newest version record."""
    record = newest_version(target.client, target.bucket, target.prefix, cache_id)
    assert record is not None, f"no version of {cache_id}"
    return record


def _verified(target: ArchiveTarget, report: dict[str, Any]) -> list[str]:
    """Problems with the version an archive report names (its record and blobs)."""
    return verify_key(_store(target), report["record_key"], report["record_sha256"])


def _boot(target: ArchiveTarget, boot_id: str) -> dict[str, Any]:
    [record] = boot_records(target.client, target.bucket, target.prefix, boot_id)
    return record


def _store(target: ArchiveTarget) -> BlobStore:
    return BlobStore(target.client, ArchiveLocation(target.bucket, target.prefix))


def _flashinfer(report: dict[str, Any]) -> str:
    return next(u["cache_id"] for u in report["caches"] if u["cache_id"].startswith("flashinfer"))


def test_second_cache_uploads_only_its_new_blobs(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    # Two cold builds of one image: same .so, .o, build.ninja and source; their JIT and ninja
    # logs (timestamps) differ, and each has its own boot's log and evidence.
    one_boot, two_boot = boot_demo(demo_project), boot_demo(demo_project, "--cold")
    first, second = _flashinfer(one_boot), _flashinfer(two_boot)

    one = _archive(demo_project, archive_target, first, "--with-content")
    after_one = archive_target.objects()
    two = _archive(demo_project, archive_target, second, "--with-content")
    after_two = archive_target.objects()

    records_one = [_record(archive_target, first), _boot(archive_target, one_boot["id"])]
    records_two = [_record(archive_target, second), _boot(archive_target, two_boot["id"])]
    blobs_one = {b["sha256"]: b["size"] for r in records_one for b in r["blobs"]}
    blobs_two = {b["sha256"]: b["size"] for r in records_two for b in r["blobs"]}
    new = set(blobs_two) - set(blobs_one)
    content = _content_shas(archive_target, second)
    shared = content & set(blobs_one)  # what the second archive did not send again
    assert len(shared) >= 4
    assert sum(blobs_two[sha] for sha in shared) > 0.8 * sum(blobs_two[sha] for sha in content)
    assert two["caches"][0]["blobs_uploaded"] == len(new)
    assert two["caches"][0]["bytes_uploaded"] == sum(blobs_two[sha] for sha in new)
    # From the server: exactly the new blobs, the two new records (the cache's version, the
    # boot's) and the boot's markers (one per cache it used) appeared, and nothing else.
    store = _store(archive_target)
    appeared = set(after_two) - set(after_one)
    records = {r["object_key"] for r in records_two}
    markers = {
        f"{archive_target.prefix}/caches/{u['cache_id']}/boots/{two_boot['id']}"
        for u in two_boot["caches"]
    }
    assert appeared == {store.blob_key(sha) for sha in new} | records | markers
    assert sum(after_two.values()) - sum(after_one.values()) == sum(
        blobs_two[sha] for sha in new
    ) + sum(after_two[key] for key in records | markers)
    assert len(after_one) == len(blobs_one) + 2 + len(one_boot["caches"])

    assert _verified(archive_target, one["caches"][0]) == []
    assert _verified(archive_target, two["caches"][0]) == []
    listed = {k.split("/")[2] for k in after_two if "/versions/" in k}
    assert listed == {first, second}
    assert _caches(demo_project)[first]["state"] == "archived"
    assert one["totals"]["blobs_uploaded"] == len(blobs_one)


def test_rearchive_reads_only_its_new_files(
    demo_project: Path, archive_target: ArchiveTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The blobs of the first cache are on the server: the second's archive asks the server for
    # them (a listing, then each one's stored ChecksumSHA256) and reads only its new files, each
    # once (some as evidence copies while collecting the records, the rest as they upload).
    first, second = _two_caches_first_archived(demo_project, archive_target)
    opened = _spy_on_cache_file_opens(monkeypatch)
    two = _archive(demo_project, archive_target, second, "--with-content")

    files = _content_files(archive_target, second)
    shared = set(_record_blobs(archive_target, first))
    shared_files = {path for path, sha in files.items() if sha in shared}
    assert any(path.endswith(".so") for path in shared_files)
    assert len(shared_files) < len(files)
    assert len(opened) == len(set(opened))
    assert not set(opened) & shared_files
    assert _verified(archive_target, two["caches"][0]) == []


def test_a_blob_replaced_on_the_server_is_found_and_sent_again(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    # Another tool overwrote a blob the second cache shares with the first: its bytes are no
    # longer what its name says. The archive finds it (no stored checksum: downloaded and
    # hashed), removes it and sends the right bytes, instead of naming it as it is.
    first, second = _two_caches_first_archived(demo_project, archive_target)
    so = next(
        sha for path, sha in _content_files(archive_target, first).items() if path.endswith(".so")
    )
    store = _store(archive_target)
    archive_target.client.put_object(
        Bucket=archive_target.bucket, Key=store.blob_key(so), Body=b"not the compiled .so"
    )
    two = _archive(demo_project, archive_target, second, "--with-content")

    assert so in _content_files(archive_target, second).values()  # the same compiled .so
    assert two["caches"][0]["blobs_uploaded"] >= 1
    body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=store.blob_key(so))
    assert hashlib.sha256(body["Body"].read()).hexdigest() == so
    assert _verified(archive_target, two["caches"][0]) == []


def test_a_large_file_streams_up_under_its_checksum(
    demo_project: Path, archive_target: ArchiveTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files over SMALL_BLOB go up as an open file, never read whole, with the sha256 of their
    # scan as ChecksumSHA256: the server stores them only if the bytes are those.
    from lifecycle.archive.transfer import SMALL_BLOB

    bodies: dict[str, type] = {}
    real_upload = BlobStore.upload_blob

    def spy(store: BlobStore, sha256: str, source: Any) -> int:
        bodies[sha256] = type(source)
        return real_upload(store, sha256, source)

    monkeypatch.setattr(BlobStore, "upload_blob", spy)
    cache_id = _flashinfer(boot_demo(demo_project))
    big = os.urandom(3 * SMALL_BLOB + 12345)
    (Path(_caches(demo_project)[cache_id]["host_path"]) / "big.cubin").write_bytes(big)
    report = _archive(demo_project, archive_target, cache_id, "--with-content")

    sha = hashlib.sha256(big).hexdigest()
    assert sha in _record_blobs(archive_target, cache_id)
    key = _store(archive_target).blob_key(sha)
    head = archive_target.client.head_object(
        Bucket=archive_target.bucket, Key=key, ChecksumMode="ENABLED"
    )
    assert head["ChecksumSHA256"] == b64_sha256(sha)
    assert (
        archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)["Body"].read()
        == big
    )
    assert bodies[sha] is not bytes  # an open file, streamed
    assert _verified(archive_target, report["caches"][0]) == []


def test_a_file_whose_bytes_changed_behind_its_scan_is_refused(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    # The scan a boot recorded still matches the file's size, mtime and inode, but its bytes
    # are others (written in place, mtime put back). The upload carries the scan's sha256:
    # the server refuses the bytes, and no record names the blob.
    from lifecycle.archive.transfer import SMALL_BLOB

    cache_id = _flashinfer(boot_demo(demo_project))
    big = Path(_caches(demo_project)[cache_id]["host_path"]) / "big.cubin"
    big.write_bytes(os.urandom(3 * SMALL_BLOB))
    adopt(cache_id)  # its scan holds big.cubin
    before = big.stat()
    with big.open("r+b") as handle:
        handle.write(b"other bytes")
    os.utime(big, ns=(before.st_atime_ns, before.st_mtime_ns))

    result = run_lifecycle(
        demo_project, "archive", "--to", archive_target.url, "--with-content", cache_id,
        env=archive_target.env,
    )  # fmt: skip
    assert result.exit_code != 0
    assert "the bytes sent are not the ones hashed" in result.output, result.output
    assert "Traceback" not in result.output
    assert (
        newest_version(
            archive_target.client, archive_target.bucket, archive_target.prefix, cache_id
        )
        is None
    )
    assert _caches(demo_project)[cache_id]["state"] == "live"


def _two_caches_first_archived(project: Path, target: ArchiveTarget) -> tuple[str, str]:
    """Two cold builds of one FlashInfer cache (sharing most files); the first archived."""
    first = _flashinfer(boot_demo(project))
    second = _flashinfer(boot_demo(project, "--cold"))
    _archive(project, target, first, "--with-content")
    return first, second


def _spy_on_cache_file_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from lifecycle.archive.plans import BlobSource

    opened: list[str] = []
    real_open = BlobSource.open

    def spy(source: BlobSource) -> Any:
        if source.entry is not None:
            opened.append(source.entry.path)
        return real_open(source)

    monkeypatch.setattr(BlobSource, "open", spy)
    return opened


def _record_blobs(target: ArchiveTarget, cache_id: str) -> dict[str, int]:
    """sha256 → size as the cache's record lists them."""
    return {b["sha256"]: b["size"] for b in _record(target, cache_id)["blobs"]}


def _content_files(target: ArchiveTarget, cache_id: str) -> dict[str, str]:
    """path → sha256 of every file of the cache, from its archived scan."""
    from lifecycle.fingerprint import Fingerprint

    record = _record(target, cache_id)
    body = target.client.get_object(
        Bucket=target.bucket, Key=_store(target).blob_key(record["fingerprint"]["sha256"])
    )["Body"].read()
    return {e.path: e.sha256 for e in Fingerprint.from_json(body.decode()).entries if e.sha256}


def _content_shas(target: ArchiveTarget, cache_id: str) -> set[str]:
    from lifecycle.fingerprint import Fingerprint

    record = _record(target, cache_id)
    body = target.client.get_object(
        Bucket=target.bucket, Key=_store(target).blob_key(record["fingerprint"]["sha256"])
    )["Body"].read()
    return {e.sha256 for e in Fingerprint.from_json(body.decode()).entries if e.sha256}


def test_records_are_self_describing_and_named_by_their_bytes(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    boot = boot_demo(demo_project)
    cache_id = _flashinfer(boot)
    report = _archive(demo_project, archive_target, cache_id)  # evidence only
    record = _record(archive_target, cache_id)
    done = report["caches"][0]

    assert record["format"] == VERSION_FORMAT and record["cache_id"] == cache_id
    assert record["with_content"] is False and record["content"] is None
    assert record["tree_digest"] == record["fingerprint"]["tree_digest"]
    assert record["cache"]["tree_digest"] == record["tree_digest"] == done["tree_digest"]
    assert record["parent"] is None and record["made_by"] == {"id": boot["id"], "outcome": "ok"}
    assert record["key"]["cache_name"] == "flashinfer" and record["key"]["base_digest"]
    assert "state" not in record["cache"] and "in_use_by" not in record["cache"]
    assert {b["sha256"] for b in record["blobs"]} == {record["fingerprint"]["sha256"]}
    fields = [name for name in record if name != "object_key"]  # added by the test's reader
    assert fields == sorted(fields)  # stable key order

    booted = _boot(archive_target, boot["id"])
    assert booted["format"] == BOOT_FORMAT and booted["boot"]["id"] == boot["id"]
    assert {u["cache_id"] for u in booted["uses"]} == {u["cache_id"] for u in boot["caches"]}
    assert {c["id"] for c in booted["caches"]} == {u["cache_id"] for u in boot["caches"]}
    assert "bundle/evidence.json" in booted["evidence"] and booted["log"]["size"] > 0
    assert booted["image"]["id"] == record["cache"]["image_id"]
    assert booted["manifest"]["digest"] == record["cache"]["manifest_digest"]
    assert [p["file"] for p in booted["patches"]] == ["patches/kernel-mix.patch"]
    referenced = {booted["log"]["sha256"]}
    referenced |= {ref["sha256"] for ref in booted["evidence"].values()}
    referenced |= {p["sha256"] for p in booted["patches"]}
    assert {b["sha256"] for b in booted["blobs"]} == referenced

    store = _store(archive_target)
    for key in (record["object_key"], booted["object_key"]):
        body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)
        body = body["Body"].read()
        sha = hashlib.sha256(body).hexdigest()
        assert key.endswith(f"{sha}.json")  # named by what it holds
        head = archive_target.client.head_object(
            Bucket=archive_target.bucket, Key=key, ChecksumMode="ENABLED"
        )
        assert head["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
    assert done["record_key"] == record["object_key"]
    assert done["record_sha256"] in record["object_key"]
    assert _verified(archive_target, done) == []
    assert verify_key(store, booted["object_key"]) == []

    before = archive_target.objects()
    again = _archive(demo_project, archive_target, cache_id)  # nothing changed: nothing sent
    assert again["caches"][0]["blobs_uploaded"] == 0
    assert again["caches"][0]["record_written"] is False
    assert again["caches"][0]["record_sha256"] == done["record_sha256"]
    assert archive_target.objects() == before  # not one object written, none rewritten


def test_corrupted_and_deleted_blobs_are_named(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    cache_id = _flashinfer(boot_demo(demo_project))
    report = _archive(demo_project, archive_target, cache_id, "--with-content")
    sha = report["caches"][0]["record_sha256"]
    store = _store(archive_target)
    content = sorted(_content_shas(archive_target, cache_id))
    corrupted, deleted = store.blob_key(content[0]), store.blob_key(content[1])
    # No checksum on this PUT: the server stores whatever it is given.
    archive_target.client.put_object(Bucket=archive_target.bucket, Key=corrupted, Body=b"bitrot")
    archive_target.client.delete_object(Bucket=archive_target.bucket, Key=deleted)

    key = report["caches"][0]["record_key"]
    problems = verify_key(store, key, sha)
    assert len(problems) == 2
    assert any(p.startswith(f"s3://{archive_target.bucket}/{corrupted}: ") for p in problems)
    assert any(p == f"s3://{archive_target.bucket}/{deleted}: missing" for p in problems)
    assert store.verify_blob(content[0]) is not None and store.verify_blob(content[2]) is None
    wrong_record = verify_key(store, key, "0" * 64)
    assert wrong_record[0].startswith(f"s3://{archive_target.bucket}/{key}: sha256 ")

    # The cache is still here: archiving again puts back exactly the two bad blobs (the bad
    # one removed first: If-None-Match would keep it otherwise), so the version there is
    # whole again and stays the cache's archive.
    repaired = _archive(demo_project, archive_target, cache_id)
    assert repaired["caches"][0]["blobs_uploaded"] == 2
    assert repaired["caches"][0]["with_content"] is True  # never downgraded
    assert repaired["caches"][0]["tree_digest"] == report["caches"][0]["tree_digest"]
    assert repaired["caches"][0]["record_key"] == key
    assert not repaired["caches"][0]["record_written"]
    assert verify_key(store, key, sha) == []


def _ledger_dump() -> list[tuple[Any, ...]]:
    with sqlite3.connect(_home() / "ledger.sqlite3") as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [(t, *row) for t in sorted(tables) for row in conn.execute(f"SELECT * FROM {t}")]


def _files() -> dict[str, int]:
    return {
        str(p): p.lstat().st_mtime_ns
        for p in _home().rglob("*")
        if not p.name.startswith("ledger.sqlite3-")  # SQLite's WAL files come and go on open
    }


def test_archive_in_a_home_where_nothing_is_recorded_answers_its_json(
    tmp_path: Path, archive_target: ArchiveTarget
) -> None:
    """`archive --all --json` on a new host printed nothing at all (exit 0): a script's JSON
    parser met an empty stdout. Its report is that of no cache, and no ledger is made."""
    for dry_run in ((), ("--dry-run",)):
        result = run_lifecycle(
            tmp_path, "archive", "--all", *dry_run, "--json", "--to", archive_target.url
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert report["format"] == "lifecycle-archive/1" and report["caches"] == []
        assert report["totals"]["caches"] == 0
        assert "nothing is recorded on this host" in result.stderr
    assert not _home().exists()
    assert archive_target.objects() == {}


def test_dry_run_writes_nothing(demo_project: Path, archive_target: ArchiveTarget) -> None:
    boot = boot_demo(demo_project)
    done = _flashinfer(boot)
    _archive(demo_project, archive_target, done, "--with-content")
    cache_dir = Path(_caches(demo_project)[done]["host_path"])
    (cache_dir / "grown-since.txt").write_text("a new file: the dry run sees it, keeps nothing\n")
    objects, ledger, files = archive_target.objects(), _ledger_dump(), _files()

    result = run_lifecycle(
        demo_project, "archive", "--all", "--with-content", "--dry-run", "--to", archive_target.url
    )
    assert result.exit_code == 0, result.output
    assert "dry run, nothing written: 4 caches" in result.stdout
    as_json = run_lifecycle(
        demo_project, "archive", "--all", "--dry-run", "--json", "--to", archive_target.url
    )
    report = json.loads(as_json.stdout)
    assert {c["cache_id"] for c in report["caches"]} == {u["cache_id"] for u in boot["caches"]}
    mine = next(c for c in report["caches"] if c["cache_id"] == done)
    assert mine["blobs_uploaded"] == 2  # the new file and the new scan; the rest is there
    assert mine["blobs_present"] == mine["blobs"] - 2 and not mine["verified"]
    assert archive_target.objects() == objects
    assert _ledger_dump() == ledger
    assert _files() == files
    # What it said would be sent is what is sent (blobs shared between caches counted once).
    real = _archive(demo_project, archive_target, "--all")
    assert real["totals"]["blobs_uploaded"] == report["totals"]["blobs_uploaded"]
    assert real["totals"]["bytes_uploaded"] == report["totals"]["bytes_uploaded"]


def test_secret_value_never_reaches_the_server(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    boot = boot_demo(demo_project, "--profile", "with-token", env={"HF_TOKEN": "secret-value"})
    assert "token=" in Path(boot["log_path"]).read_text()
    _archive(demo_project, archive_target, "--all", "--with-content")
    objects = archive_target.objects()
    assert len(objects) > 10
    for key in objects:
        body = archive_target.client.get_object(Bucket=archive_target.bucket, Key=key)
        assert b"secret-value" not in body["Body"].read(), key


def test_in_use_torn_down_and_unknown_caches_are_refused(
    demo_project: Path, archive_target: ArchiveTarget
) -> None:
    cache_id = _flashinfer(boot_demo(demo_project))
    ledger = Ledger.open(_home())
    with ledger.transaction() as conn:
        conn.execute("UPDATE caches SET in_use_by = 'b-running' WHERE id = ?", (cache_id,))
    running = try_lease(Home(_home()), cache_id)  # as a live boot holds it
    assert running is not None
    with running:
        result = run_lifecycle(demo_project, "archive", cache_id, "--to", archive_target.url)
    assert result.exit_code == 1
    assert f"cache {cache_id} is in use by boot b-running" in result.stderr
    with ledger.transaction() as conn:
        conn.execute(
            "UPDATE caches SET in_use_by = NULL, state = 'torn-down' WHERE id = ?", (cache_id,)
        )
    ledger.close()
    result = run_lifecycle(demo_project, "archive", cache_id, "--to", archive_target.url)
    assert result.exit_code == 1 and "was torn down" in result.stderr
    result = run_lifecycle(demo_project, "archive", cache_id[:-1], "--to", archive_target.url)
    assert result.exit_code == 2 and f"did you mean {cache_id!r}" in result.stderr
    result = run_lifecycle(demo_project, "archive", "--to", archive_target.url)
    assert result.exit_code == 2 and "or pass --all" in result.stderr
    assert archive_target.objects() == {}


@pytest.mark.parametrize("fault", ["no-such-bucket", "bad-credentials", "bad-digest"])
def test_server_refusals_are_one_clear_line(
    demo_project: Path, weed_server: WeedServer, fault: str
) -> None:
    cache_id = _flashinfer(boot_demo(demo_project))
    client, location = weed_server.client(), ArchiveLocation("archive", "x")
    if fault == "bad-digest":
        store = BlobStore(client, location)
        with pytest.raises(ArchiveError, match="the bytes sent are not the ones hashed"):
            store.upload_blob(hashlib.sha256(b"what was hashed").hexdigest(), b"what was sent")
        assert (
            list(store.list()) == []
            and store.head(store.blob_key("0" * 64), checksum=False) is None
        )
        return
    if fault == "no-such-bucket":
        location, expected = ArchiveLocation("no-such-bucket", "x"), "does not exist on"
    else:
        # Built here rather than through the CLI's environment: boto3's default session keeps
        # the credentials it first resolved for the rest of the process.
        client = boto3.client(
            "s3",
            endpoint_url=weed_server.endpoint,
            aws_access_key_id=weed_server.access_key,
            aws_secret_access_key="wrong",
            region_name="us-east-1",
        )
        expected = "access denied (SignatureDoesNotMatch); check the credentials"
    ledger = Ledger.open(_home())
    with pytest.raises(ArchiveError) as raised:
        archive_caches(
            ledger,
            Home(_home()),
            client,
            location,
            [cache_id],
            host_env={},
            with_content=False,
            dry_run=False,
            progress=None,
        )
    ledger.close()
    message = str(raised.value)
    assert "\n" not in message and expected in message, message
    assert message.startswith(f"archive of {cache_id} to {location.url()} failed: ")


def test_server_stopped_mid_archive_then_rerun_completes(
    demo_project: Path, weed_server: WeedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle.archive import transfer

    monkeypatch.setattr(transfer, "TICK_S", 0.0)  # a progress line after every blob sent
    boot = boot_demo(demo_project)
    cache_id = next(u["cache_id"] for u in boot["caches"] if u["cache_id"].startswith("triton"))
    cache_dir = Path(_caches(demo_project)[cache_id]["host_path"])
    for n in range(400):  # enough blobs that the server dies with most still to send
        (cache_dir / f"kernel-{n:03}.cubin").write_bytes(os.urandom(8192))
    location = ArchiveLocation("archive", "lab")
    env = weed_server.env
    lines: list[str] = []

    def progress(line: str) -> None:
        lines.append(line)
        if "uploaded" in line and len(lines) == 101:  # the 100th blob sent
            weed_server.stop(kill=True)

    ledger = Ledger.open(_home())
    with pytest.raises(ArchiveError) as raised:
        archive_caches(
            ledger, Home(_home()), weed_server.client(), location, [cache_id], host_env={},
            with_content=True, dry_run=False, progress=progress,
        )  # fmt: skip
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"archive of {cache_id} to s3://archive/lab failed: ")
    assert f"the S3 server {weed_server.endpoint} is not answering" in message
    assert ledger.query("SELECT * FROM archives") == []
    assert _caches(demo_project)[cache_id]["state"] == "live"
    # The CLI says the same in one line, exit 1, while the server is down.
    result = run_lifecycle(demo_project, "archive", cache_id, "--to", location.url(), env=env)
    assert result.exit_code == 3 and "is not answering" in result.stderr
    assert "Traceback" not in result.output

    weed_server.start()
    store = BlobStore(weed_server.client(), location)
    written = _keys(weed_server.client(), "lab/")
    assert not [key for key in written if key.endswith(".json")]  # records go last: none
    there = [key for key in written if "/blobs/" in key]
    [report] = archive_caches(
        ledger, Home(_home()), weed_server.client(), location, [cache_id], host_env={},
        with_content=True, dry_run=False, progress=lines.append,
    )  # fmt: skip
    assert 100 <= len(there) < report.blobs
    assert report.blobs_uploaded == report.blobs - len(there)  # only what was missing
    assert report.verified
    assert verify_key(store, report.record_key, report.record_sha256) == []
    assert ledger.query("SELECT cache_id FROM archives")[0][0] == cache_id
    ledger.close()


def _keys(client: Any, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="archive", Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


class _CountingStore(BlobStore):
    """A store that notes which blobs it had to HEAD."""

    def __init__(self, client: Any, location: ArchiveLocation) -> None:
        super().__init__(client, location)
        self.heads: list[str] = []

    def verify_blob(
        self, sha256: str, *, size: int | None = None, key_of: KeyOf | None = None
    ) -> str | None:
        self.heads.append(sha256)
        return super().verify_blob(sha256, size=size, key_of=key_of)


def test_listing_past_its_page_budget_falls_back_to_head(archive_target: ArchiveTarget) -> None:
    # Two blobs in one shard with more unrelated keys between them than the listing's budget
    # reads: the first is answered by the listing, the second by a HEAD.
    store = _CountingStore(
        archive_target.client, ArchiveLocation(archive_target.bucket, archive_target.prefix)
    )
    store.list_page = 5
    seen: dict[str, bytes] = {}
    for n in range(10_000):  # two of the first few dozen share a shard (birthday bound)
        data = f"blob {n}".encode()
        sha = hashlib.sha256(data).hexdigest()
        if sha[:2] in seen:
            break
        seen[sha[:2]] = data
    pair = sorted([data, seen[sha[:2]]], key=lambda d: hashlib.sha256(d).hexdigest())
    refs = [
        BlobRef(hashlib.sha256(d).hexdigest(), len(d), hashlib.md5(d).hexdigest()) for d in pair
    ]
    low, high = refs
    for ref, data in zip(refs, pair, strict=True):
        store.upload_blob(ref.sha256, data)
    for k in range(12):  # between the two: 12 keys, 5 to a page, a budget of 1 page
        key = f"{store.blob_key(low.sha256)}-unrelated-{k:02}"
        archive_target.client.put_object(Bucket=archive_target.bucket, Key=key, Body=b"x")

    assert store.check_blobs(refs, workers=2) == {low.sha256: None, high.sha256: None}
    assert store.heads == [high.sha256]
    archive_target.client.delete_object(
        Bucket=archive_target.bucket, Key=store.blob_key(high.sha256)
    )
    missing = f"s3://{archive_target.bucket}/{store.blob_key(high.sha256)}: missing"
    assert store.check_blobs(refs, workers=2) == {low.sha256: None, high.sha256: missing}
