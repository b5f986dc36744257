"""Records planned on this host: what a cache version's and a boot's record say (read from the
ledger and this host's files), the bytes behind each blob they name (BlobSource), and a record's
rendering once its blobs are up (blobs first, the record last).

A version never changes once written; the boots that used the cache are records of their own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from lifecycle.archive.store import READ_CHUNK, ArchiveError, open_regular
from lifecycle.build.plan import key_factors
from lifecycle.fingerprint import Entry, Fingerprint
from lifecycle.formats import BOOT_FORMAT, VERSION_FORMAT
from lifecycle.home import Home, read_record
from lifecycle.ledger import Ledger
from lifecycle.ledger.boots import (
    BootRecord,
    CacheRecord,
    TaintedFile,
    baked_uses,
    boot_by_id,
    cache_by_id,
    cache_uses,
    damage_of,
    hook_runs_of,
    tainted_files,
)
from lifecycle.ledger.builds import registry_images
from lifecycle.redact import secrets_in_bytes, secrets_in_file
from lifecycle.withheld import withheld_files

_LOCAL_ONLY = ("state", "in_use_by")  # this host's bookkeeping, not facts about the cache


@dataclass(frozen=True)
class BlobSource:
    """The bytes of one blob on this host: in memory, an evidence file, or a cache file."""

    sha256: str
    size: int
    what: str  # for messages: "cache file a/b.so", "evidence of boot b-…"
    data: bytes | None = None
    path: Path | None = None  # an evidence file, or a cache file relative to `root`
    root: Path | None = None
    entry: Entry | None = None  # what the scan saw of a cache file: checked again on open

    def open(self) -> BinaryIO:
        """A reader of exactly these bytes; a cache file that changed since its scan is refused."""
        if self.data is not None:
            return io.BytesIO(self.data)
        if self.root is not None and self.entry is not None:
            return open_beneath(self.root, self.entry)
        assert self.path is not None, "a BlobSource has data, a path, or a root and an entry"
        return open_regular(self.path)


@dataclass(frozen=True)
class RecordPlan:
    """A record without its blob list and time, and one source per blob it refers to."""

    document: dict[str, Any]
    sources: dict[str, BlobSource]

    def secrets_carried(self, secrets: Mapping[str, str]) -> list[tuple[str, str]]:
        """(where, secret name) for each part of the record that would carry a secret's value
        to the server: a field of its document (a manifest's text, an image's labels), or a
        blob that is no cache file (a log, evidence, a patch; a cache file holding one is
        withheld by its scan). What a boot kept was redacted of the secrets known then: one
        known since, or a value written into a manifest or patch, is found here."""
        found = [
            (f"its {key}", name)
            for key, value in sorted(self.document.items())
            for name in secrets_in_bytes(json.dumps(value, sort_keys=True).encode(), secrets)
        ]
        for source in self.sources.values():
            if source.entry is not None:
                continue
            names = (
                secrets_in_bytes(source.data, secrets)
                if source.data is not None
                else secrets_in_file(source.path, secrets)
                if source.path is not None
                else []
            )
            found += [(source.what, name) for name in names]
        return found


def render_record(
    plan: RecordPlan,
    archived_at: str,
    placed: Mapping[str, tuple[str, int]] | None = None,
    pack_sizes: Mapping[str, int] | None = None,
) -> bytes:
    """The record's bytes: stable key order, one blob entry per distinct sha256. A cache
    version also lists its packs, and for each packed blob its pack and offset."""
    placed = placed or {}
    blobs: list[dict[str, Any]] = []
    for sha, source in sorted(plan.sources.items()):
        if sha in placed:
            pack, offset = placed[sha]
            blobs.append({"sha256": sha, "size": source.size, "pack": pack, "offset": offset})
        else:
            blobs.append({"sha256": sha, "size": source.size})
    document = {**plan.document, "archived_at": archived_at, "blobs": blobs}
    if pack_sizes is not None:
        used = sorted({pack for pack, _ in placed.values()})
        document["packs"] = [{"sha256": pack, "size": pack_sizes[pack]} for pack in used]
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()


def file_blob(path: Path, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """Hash a (small) evidence file now, add it to `sources`; its {sha256, size}. It is read
    again, and checked, when uploaded."""
    sha, size = hashlib.sha256(), 0
    with open_regular(path) as handle:
        while chunk := handle.read(READ_CHUNK):
            sha.update(chunk)
            size += len(chunk)
    source = BlobSource(sha.hexdigest(), size, what, path=path)
    sources.setdefault(source.sha256, source)
    return {"sha256": source.sha256, "size": size}


def memory_blob(data: bytes, what: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    """Bytes in memory as a blob added to `sources`; its {sha256, size}."""
    sha = hashlib.sha256(data).hexdigest()
    sources.setdefault(sha, BlobSource(sha, len(data), what, data=data))
    return {"sha256": sha, "size": len(data)}


def regular_files(top: Path) -> list[Path]:
    """Regular files below `top`; symlinks (to files or dirs) are neither followed nor kept."""
    found = []
    for directory, _, names in os.walk(top, followlinks=False):
        for name in names:
            path = Path(directory, name)
            if stat.S_ISREG(path.lstat().st_mode):
                found.append(path)
    return found


def read_snapshot(path: Path) -> Any:
    """A provenance snapshot a boot kept (the image's, the manifest's), or None if none."""
    try:
        return read_record(path)
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"{path}: damaged snapshot: {exc}") from exc


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


def plan_version(
    ledger: Ledger,
    home: Home,
    cache: CacheRecord,
    fingerprint: Fingerprint,
    *,
    with_content: bool,
    parent: str | None,
    host: str,
    tool_version: str,
    found: Sequence[TaintedFile] = (),
) -> RecordPlan:
    """Collect what the version record says about `cache` (scanned as `fingerprint`; `found`:
    files that scan found holding a secret's value, which a dry run does not record)."""
    sources: dict[str, BlobSource] = {}
    scan = memory_blob(fingerprint.to_json().encode(), f"fingerprint of {cache.id}", sources)
    document: dict[str, Any] = {
        "format": VERSION_FORMAT,
        "cache_id": cache.id,
        "tree_digest": fingerprint.tree_digest,
        "parent": parent,
        "made_by": _made_by(ledger, cache.id),
        "host": host,
        "tool_version": tool_version,
        "with_content": with_content,
        "cache": {k: v for k, v in asdict(cache).items() if k not in _LOCAL_ONLY},
        "key": _key_factors(home, cache),
        "fingerprint": {
            **scan,
            "tree_digest": fingerprint.tree_digest,
            "files": fingerprint.files,
            "bytes": fingerprint.bytes,
        },
        "content": None,
        "withheld": [],
    }
    if with_content:
        root = Path(cache.host_path)
        # A file holding a secret's value, in its bytes or its name, stays on this host; the
        # record says so.
        withheld = withheld_files(fingerprint, [*tainted_files(ledger, cache.id), *found])
        document["withheld"] = [asdict(w) for w in withheld]
        left_out = {w.path for w in withheld}
        files = [e for e in fingerprint.entries if e.kind == "file" and e.path not in left_out]
        for e in files:
            assert e.sha256 is not None, "a scanned file always has its sha256"
            source = BlobSource(e.sha256, e.size, f"cache file {e.path}", root=root, entry=e)
            sources.setdefault(e.sha256, source)
        document["content"] = {"files": len(files), "bytes": sum(e.size for e in files)}
    return RecordPlan(document, sources)


def _made_by(ledger: Ledger, cache_id: str) -> dict[str, str] | None:
    """The last boot here that used the cache (whose end-of-boot scan is what it holds). A
    tree changed behind lifecycle's back since was made by nobody lifecycle knows: `damaged`,
    which `restore --best` never takes, as it never takes a boot's that did not end `ok`."""
    uses = cache_uses(ledger, cache_id=cache_id)
    boots = [b for u in uses if (b := boot_by_id(ledger, u.boot_id)) is not None]
    last = max(boots, key=lambda b: b.started_at) if boots else None
    damaged = damage_of(ledger, cache_id)
    if damaged is not None:
        return {"id": last.id if last else damaged.found_by, "outcome": "damaged"}
    return None if last is None else {"id": last.id, "outcome": last.outcome}


def _key_factors(home: Home, cache: CacheRecord) -> dict[str, Any] | None:
    """What the cache's key was made of, read from the boot snapshot of its image."""
    path = home.image_snapshot(cache.image_id)
    if not path.is_file():
        return None
    try:
        labels = json.loads(path.read_text()).get("labels") or {}
    except ValueError:
        return None
    return key_factors(labels, cache.cache_name, cache.manifest_digest, cache.arch)


def plan_boot_record(
    ledger: Ledger, home: Home, boot: BootRecord, *, host: str, tool_version: str
) -> RecordPlan:
    """Collect what the record says about a finished boot, and its blobs. Nothing here reads the
    environment: secrets appear only as the names the boot row lists, and the log and evidence
    were redacted when the boot kept them."""
    sources: dict[str, BlobSource] = {}
    uses = cache_uses(ledger, boot_id=boot.id)
    caches = [c for u in uses if (c := cache_by_id(ledger, u.cache_id)) is not None]
    evidence: dict[str, Any] = {}
    if boot.evidence_path and Path(boot.evidence_path).is_dir():
        top = Path(boot.evidence_path)
        for path in sorted(regular_files(top)):
            what = f"evidence of boot {boot.id}"
            evidence[path.relative_to(top).as_posix()] = file_blob(path, what, sources)
    manifest = read_snapshot(home.manifest_snapshot(boot.manifest_digest))
    document: dict[str, Any] = {
        "format": BOOT_FORMAT,
        "boot_id": boot.id,
        "boot": asdict(boot),
        "arch": ", ".join(sorted({c.arch for c in caches})) or "unknown",
        "caches": [asdict(c.row()) for c in caches],
        "uses": [asdict(use) for use in uses],
        "baked": [asdict(use) for use in baked_uses(ledger, boot.id)],
        "hook_runs": hook_runs(ledger, boot.id),
        "log": boot_log(boot, sources),
        "evidence": evidence,
        "image": image_snapshot(ledger, home, boot.image_id),
        "manifest": manifest,
        "patches": [
            _patch(home, p["file"], p["sha256"], sources)
            for p in (manifest or {}).get("patches", [])
        ],
        "host": host,
        "tool_version": tool_version,
    }
    return RecordPlan(document, sources)


def hook_runs(ledger: Ledger, boot_id: str) -> list[dict[str, Any]]:
    """A boot's hook runs as records list them (without the boot id they sit under)."""
    return [
        {"name": r.name, "event": r.event, "exit_code": r.exit_code, "duration_s": r.duration_s}
        for r in hook_runs_of(ledger, boot_id)
    ]


def boot_log(boot: BootRecord, sources: dict[str, BlobSource]) -> dict[str, Any] | None:
    """The boot's kept log as a blob, or None when it kept none."""
    log = Path(boot.log_path) if boot.log_path else None
    if log is None or not log.is_file():
        return None
    return file_blob(log, f"log of boot {boot.id}", sources)


def image_snapshot(ledger: Ledger, home: Home, image_id: str) -> dict[str, Any] | None:
    """The snapshot a boot kept of its image, with every registry digest this host pushed it
    to or pulled it from since (a push after the boot is still the same image)."""
    snapshot = read_snapshot(home.image_snapshot(image_id))
    if snapshot is None:
        return None
    known = set(snapshot.get("repo_digests") or [])
    known |= {image.reference for image in registry_images(ledger, image_id)}
    return {**snapshot, "repo_digests": sorted(known)}


def _patch(home: Home, file: str, sha256: str, sources: dict[str, BlobSource]) -> dict[str, Any]:
    path = home.patch_copy(sha256)
    if not path.is_file():
        return {"file": file, "sha256": sha256, "size": None}
    blob = file_blob(path, f"patch {file}", sources)
    if blob["sha256"] != sha256:
        raise ArchiveError(f"{path}: content does not match its name; the kept patch is damaged")
    return {"file": file, **blob}
