"""A cache's archive record (`lifecycle-cache-record/1`) and where each of its blobs comes from.

The record is one JSON object, keys sorted, that says everything this host knows about one
cache without needing this host:

    format        "lifecycle-cache-record/1"
    cache_id      the cache's id
    archived_at   when the record was written (ISO 8601, UTC)
    host          the host that wrote it; tool_version: lifecycle's version there
    with_content  true when every regular file of the cache is a blob too
    cache         the ledger's cache row (less this host's bookkeeping: state, in_use_by)
    fingerprint   {sha256, size: the scan JSON's blob; tree_digest, files, bytes}
    content       {files, bytes} when with_content, else null; each file's blob is the
                  sha256 its fingerprint entry names
    withheld      with_content only: [{path, sha256, why}] of the files left out because a
                  boot wrote a secret's value into them (absent in older records)
    boots         per boot that used the cache, oldest first: {boot (row), use (its cache-use
                  row for this cache), hook_runs, log: {sha256, size} | null, evidence:
                  {path under evidence/boots/<boot>/: {sha256, size}}}
    image         the image snapshot (id, tags, labels) or null
    manifest      the resolved-manifest snapshot (digest, file, canonical, patches) or null
    patches       [{file, sha256, size}]: each patch's bytes are the blob of that sha256
                  (size null when this host kept no copy)
    blobs         [{sha256, size, md5}] sorted: every blob the record refers to, which is
                  what verification checks (md5 is the ETag a single PUT of it gets)

Nothing here reads the environment: secrets appear only as the names a boot row lists, and
the logs and evidence were redacted when the boot kept them.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lifecycle.archive.store import READ_CHUNK, ArchiveError, BlobRef, open_regular
from lifecycle.fingerprint import Entry, Fingerprint
from lifecycle.home import Home
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    CacheRecord,
    all_boots,
    cache_uses,
    hook_runs_of,
    tainted_files,
)
from lifecycle.records import CACHE_FORMAT, CacheRecordV1, RecordInvalid, parse_cache_record

FORMAT = CACHE_FORMAT
_LOCAL_ONLY = ("state", "in_use_by")  # this host's bookkeeping, not facts about the cache


@dataclass(frozen=True)
class BlobSource:
    """The bytes of one blob on this host: in memory, an evidence file, or a cache file."""

    sha256: str
    size: int
    what: str  # for messages: "cache file a/b.so", "evidence of boot b-…"
    md5: str | None = None  # known when the bytes were read while collecting
    data: bytes | None = None
    path: Path | None = None  # an evidence file, or a cache file relative to `root`
    root: Path | None = None
    entry: Entry | None = None  # what the scan saw of a cache file: checked again on open
    remote: bool = False  # only on the server: named by an earlier record, not kept here

    def open(self) -> BinaryIO:
        """A reader of exactly these bytes; a cache file that changed since its scan is refused."""
        if self.remote:
            raise ArchiveError(f"{self.what}: not on this host, and not intact on the server")
        if self.data is not None:
            return io.BytesIO(self.data)
        if self.root is not None and self.entry is not None:
            return open_beneath(self.root, self.entry)
        assert self.path is not None, "a BlobSource has data, a path, or a root and an entry"
        return open_regular(self.path)


@dataclass(frozen=True)
class RecordPlan:
    """The record without its blob list and time, and one source per blob it refers to."""

    document: dict[str, Any]
    sources: dict[str, BlobSource]


def plan_record(
    ledger: Ledger,
    cache: CacheRecord,
    fingerprint: Fingerprint,
    *,
    with_content: bool,
    host: str,
    tool_version: str,
) -> RecordPlan:
    """Collect what the record says about `cache` (scanned as `fingerprint`) and its blobs."""
    sources: dict[str, BlobSource] = {}
    scan = _memory_blob(fingerprint.to_json().encode(), f"fingerprint of {cache.id}", sources)
    row = {k: v for k, v in asdict(cache).items() if k not in _LOCAL_ONLY}
    document: dict[str, Any] = {
        "format": FORMAT,
        "cache_id": cache.id,
        "host": host,
        "tool_version": tool_version,
        "with_content": with_content,
        "cache": row,
        "fingerprint": {
            **scan,
            "tree_digest": fingerprint.tree_digest,
            "files": fingerprint.files,
            "bytes": fingerprint.bytes,
        },
        "content": None,
        "boots": _boots(ledger, cache.id, sources),
    }
    home = ledger.home
    document["image"] = _snapshot(home.image_snapshot(cache.image_id))
    snapshot = document["manifest"] = _snapshot(home.manifest_snapshot(cache.manifest_digest))
    document["patches"] = [
        _patch(home, p["file"], p["sha256"], sources) for p in (snapshot or {}).get("patches", [])
    ]
    if with_content:
        root = Path(cache.host_path)
        # A file a boot wrote a secret's value into stays on this host; the record says so.
        secret_in: dict[tuple[str, str | None], list[str]] = {}
        for found in tainted_files(ledger, cache.id):
            secret_in.setdefault((found.path, found.sha256), []).append(found.secret)
        withheld = [e for e in fingerprint.entries if (e.path, e.sha256) in secret_in]
        document["withheld"] = [
            {
                "path": e.path,
                "sha256": e.sha256,
                "why": f"holds the value of secret {', '.join(secret_in[e.path, e.sha256])}",
            }
            for e in withheld
        ]
        files = [
            e
            for e in fingerprint.entries
            if e.kind == "file" and (e.path, e.sha256) not in secret_in
        ]
        for e in files:
            assert e.sha256 is not None, "a scanned file always has its sha256"
            source = BlobSource(e.sha256, e.size, f"cache file {e.path}", root=root, entry=e)
            sources.setdefault(e.sha256, source)
        document["content"] = {"files": len(files), "bytes": sum(e.size for e in files)}
    return RecordPlan(document, sources)


def carry_over(plan: RecordPlan, earlier: CacheRecordV1 | None) -> RecordPlan:
    """Keep the boots an earlier record of the cache lists and this ledger does not know.

    A cache restored from another host's archive has its boots in that host's ledger only;
    archiving it again here must not forget them. Their blobs stay where they are.
    """
    known = {boot["boot"]["id"] for boot in plan.document["boots"]}
    kept = [b for b in (earlier.boots if earlier else []) if b.boot.id not in known]
    if not kept:
        return plan
    assert earlier is not None
    listed = {blob.sha256: blob for blob in earlier.blobs}
    sources = dict(plan.sources)
    for boot in kept:
        what = f"evidence of boot {boot.boot.id} (archived by {earlier.host})"
        for ref in [*([boot.log] if boot.log else []), *boot.evidence.values()]:
            blob = listed.get(ref.sha256)
            if blob is None:
                raise ArchiveError(f"the archived record lists no blob {ref.sha256} ({what})")
            source = BlobSource(ref.sha256, blob.size, what, md5=blob.md5, remote=True)
            sources.setdefault(ref.sha256, source)
    boots = sorted(
        [*plan.document["boots"], *(b.model_dump(mode="json") for b in kept)],
        key=lambda boot: boot["boot"]["started_at"],
    )
    return RecordPlan({**plan.document, "boots": boots}, sources)


def render_record(plan: RecordPlan, md5s: dict[str, str], archived_at: str) -> bytes:
    """The record's bytes: stable key order, one blob entry per distinct sha256."""
    blobs = [
        {"sha256": sha, "size": source.size, "md5": md5s[sha]}
        for sha, source in sorted(plan.sources.items())
    ]
    document = {**plan.document, "archived_at": archived_at, "blobs": blobs}
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def parse_record(body: bytes, where: str, record_format: str) -> dict[str, Any]:
    """Parse any archive record as JSON, refusing what does not say it is `record_format`."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(f"{where}: not a JSON record: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != record_format:
        raise ArchiveError(f"{where}: not a {record_format} record")
    return document


def load_record(body: bytes, where: str) -> CacheRecordV1:
    """A cache record (`lifecycle-cache-record/1`), checked field by field against its format;
    anything else is one ArchiveError naming the object and what is wrong."""
    try:
        return parse_cache_record(parse_record(body, where, FORMAT))
    except RecordInvalid as exc:
        raise ArchiveError(f"{where}: not a valid {FORMAT} record: {exc}") from None


def record_blobs(document: CacheRecordV1) -> list[BlobRef]:
    """Every blob a record refers to."""
    return [BlobRef(b.sha256, b.size, b.md5) for b in document.blobs]


def same_record(old: bytes, new: bytes) -> bool:
    """True when two records say the same but for when they were written."""
    try:
        a, b = json.loads(old), json.loads(new)
    except ValueError:
        return False
    for document in (a, b):
        if isinstance(document, dict):
            document.pop("archived_at", None)
    return bool(a == b)


def open_beneath(root: Path, entry: Entry) -> BinaryIO:
    """Open a cache file through directory fds, following no symlink below the cache root."""
    # A component swapped for a symlink since the scan (say to /etc) fails with ELOOP
    # instead of reaching outside the cache; the final identity check catches any other swap.
    parts = entry.path.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            parent, fd = fd, os.open(part, flags, dir_fd=fd)
            os.close(parent)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        parent, fd = fd, os.open(parts[-1], flags, dir_fd=fd)
        os.close(parent)
    except OSError as exc:
        os.close(fd)
        raise ArchiveError(f"{root}/{entry.path}: {exc.strerror}; {_CHANGED}") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns, st.st_ino) != (
        entry.size,
        entry.mtime_ns,
        entry.inode,
    ):
        os.close(fd)
        raise ArchiveError(f"{root}/{entry.path}: changed since its scan; {_CHANGED}")
    return os.fdopen(fd, "rb")


_CHANGED = "is a boot writing this cache? archive it again once it is idle"


def _boots(ledger: Ledger, cache_id: str, sources: dict[str, BlobSource]) -> list[dict[str, Any]]:
    """Each boot that used the cache, with its log and evidence bundle as blobs."""
    boots = {boot.id: boot for boot in all_boots(ledger)}
    found = []
    for use in (u for u in cache_uses(ledger) if u.cache_id == cache_id):
        boot = boots[use.boot_id]
        runs = _hook_runs(ledger, boot.id)
        log = Path(boot.log_path) if boot.log_path else None
        evidence: dict[str, Any] = {}
        if boot.evidence_path and Path(boot.evidence_path).is_dir():
            top = Path(boot.evidence_path)
            for path in sorted(_regular_files(top)):
                what = f"evidence of boot {boot.id}"
                evidence[path.relative_to(top).as_posix()] = _file_blob(path, what, sources)
        found.append(
            {
                "boot": asdict(boot),
                "use": asdict(use),
                "hook_runs": runs,
                "log": _file_blob(log, f"log of boot {boot.id}", sources)
                if log is not None and log.is_file()
                else None,
                "evidence": evidence,
            }
        )
    return found


def _hook_runs(ledger: Ledger, boot_id: str) -> list[dict[str, Any]]:
    """A boot's hook runs as records list them (without the boot id they sit under)."""
    return [
        {"name": r.name, "event": r.event, "exit_code": r.exit_code, "duration_s": r.duration_s}
        for r in hook_runs_of(ledger, boot_id)
    ]


def _snapshot(path: Path) -> Any:
    """A provenance snapshot the boot kept (None if it kept none)."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ArchiveError(f"{path}: damaged snapshot: {exc}") from exc


def _regular_files(top: Path) -> list[Path]:
    """Regular files below `top`; symlinks (to files or dirs) are neither followed nor kept."""
    found = []
    for directory, _, names in os.walk(top, followlinks=False):
        for name in names:
            path = Path(directory, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append(path)
    return found


def _patch(home: Home, file: str, sha256: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    path = home.patch_copy(sha256)
    if not path.is_file():
        return {"file": file, "sha256": sha256, "size": None}
    blob = _file_blob(path, f"patch {file}", sources)
    if blob["sha256"] != sha256:
        raise ArchiveError(f"{path}: content does not match its name; the kept patch is damaged")
    return {"file": file, **blob}


def _file_blob(path: Path, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """Hash a (small) evidence file now; it is read again, and checked, when uploaded."""
    sha, md5, size = hashlib.sha256(), hashlib.md5(usedforsecurity=False), 0
    with open_regular(path) as handle:
        while chunk := handle.read(READ_CHUNK):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    source = BlobSource(sha.hexdigest(), size, what, md5=md5.hexdigest(), path=path)
    sources.setdefault(source.sha256, source)
    return {"sha256": source.sha256, "size": size}


def _memory_blob(data: bytes, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    sha = hashlib.sha256(data).hexdigest()
    md5 = hashlib.md5(data, usedforsecurity=False).hexdigest()
    sources.setdefault(sha, BlobSource(sha, len(data), what, md5=md5, data=data))
    return {"sha256": sha, "size": len(data)}


# --- for result records (lifecycle.results.archive) and `lifecycle verify` ----------------------


def boot_facts(ledger: Ledger, boot: BootRecord, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """A boot as records tell it: its row, its hook runs, and its log as a blob (or null)."""
    runs = _hook_runs(ledger, boot.id)
    log = Path(boot.log_path) if boot.log_path else None
    return {
        "boot": asdict(boot),
        "hook_runs": runs,
        "log": _file_blob(log, f"log of boot {boot.id}", sources)
        if log is not None and log.is_file()
        else None,
    }


def evidence_blob(path: Path, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """{sha256, size} of an evidence file, added to `sources` as the blob that carries it."""
    return _file_blob(path, what, sources)


def read_snapshot(path: Path) -> Any:
    """A provenance snapshot a boot kept (the image's, the manifest's), or None if none."""
    return _snapshot(path)


def blob_roles(document: CacheRecordV1) -> dict[str, str]:
    """sha256 -> what a cache record's blob holds, for messages that name the damaged object.

    Content files are named by the caller, who has the fingerprint (itself a blob) in hand.
    """
    cache_id = document.cache_id
    roles: dict[str, str] = {document.fingerprint.sha256: f"fingerprint of cache {cache_id}"}
    for patch in document.patches:
        roles.setdefault(patch.sha256, f"patch {patch.file}")
    for boot in document.boots:
        if boot.log:
            roles.setdefault(boot.log.sha256, f"log of boot {boot.boot.id}")
        for path, ref in boot.evidence.items():
            roles.setdefault(ref.sha256, f"evidence {path} of boot {boot.boot.id}")
    return roles
