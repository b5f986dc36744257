"""Which cache of each name goes into a baked image: of the caches a warm boot of the engine
image would mount (its key), the newest whose tree is proven, or one line saying why none is.
Proven (docs/verbs/bake.md): archived and verifying now, last boot ok and not partial, nothing
withheld for a secret, unchanged since its last scan (rescanned as boots and archives scan:
lifecycle.withheld); a baked cache audits to its record even after this host's copy is gone."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.verify import VerifiedRecord
from lifecycle.boot.baked import BakedCache
from lifecycle.boot.caches import last_scan
from lifecycle.build.plan import cache_key, key_factors
from lifecycle.evidence.verdict import recorded_uses, recorded_warmth
from lifecycle.fingerprint import scan
from lifecycle.home import Home
from lifecycle.leases import CacheLease, try_lease
from lifecycle.ledger import Ledger
from lifecycle.ledger.archives import ArchiveRecord, archive_of
from lifecycle.ledger.boots import (
    CacheRecord,
    cache_uses,
    last_boot,
    tainted_files,
    untracked_writes,
    warm_candidates,
)
from lifecycle.manifest.model import JitCache
from lifecycle.table import count_of
from lifecycle.withheld import masked_links, withheld_files

Verify = Callable[[ArchiveRecord], VerifiedRecord]


@dataclass(frozen=True)
class Chosen:
    """A cache to bake, the host dir its tree is read from, and its lease: held until the
    image is built, so no boot writes into it (nor a teardown removes it) meanwhile."""

    baked: BakedCache
    host_path: Path
    lease: CacheLease


@dataclass(frozen=True)
class Refused:
    """No cache of this name can be baked, and why (of the newest candidate, if any)."""

    name: str
    why: str


def choose(
    ledger: Ledger,
    home: Home,
    caches: Mapping[str, JitCache],
    labels: Mapping[str, str],
    manifest_digest: str,
    arch: str,
    verify: Verify,
    secrets: Mapping[str, str],
) -> list[Chosen | Refused]:
    """One choice per active cache of the manifest, in the manifest's order; each chosen one
    under its lease (the caller releases them; on an error here they are released).
    `secrets`: the values the rescans mask (`secrets_on_host`), as a boot's scans do."""
    choices: list[Chosen | Refused] = []
    try:
        for name, declared in caches.items():
            key = cache_key(key_factors(labels, name, manifest_digest, arch))
            none = f"no cache of this image's key (arch {arch}) whose last boot ended ok: boot it"
            chosen = _one(ledger, home, name, declared.path, key, verify, secrets)
            choices.append(chosen or Refused(name, none))
    except BaseException:
        release(choices)
        raise
    return choices


def release(choices: Sequence[Chosen | Refused]) -> None:
    """Give back the lease of every chosen cache."""
    for choice in choices:
        if isinstance(choice, Chosen):
            choice.lease.release()


def _one(
    ledger: Ledger,
    home: Home,
    name: str,
    path: str,
    key: str,
    verify: Verify,
    secrets: Mapping[str, str],
) -> Chosen | Refused | None:
    """The newest proven cache of `name` under `key`, taken under its lease; or why the newest
    is not; None when there is no candidate at all."""
    reasons = []
    for cache in warm_candidates(ledger, key):
        lease = try_lease(home, cache.id)
        busy = "in use: a boot holds it"
        unproven = _unproven(ledger, cache, verify, secrets) if lease else busy
        if lease is not None and unproven is None:
            return Chosen(_baked(ledger, cache, path), Path(cache.host_path), lease)
        if lease is not None:
            lease.release()
        reasons.append(f"{cache.id}: {unproven}")
    return Refused(name, reasons[0]) if reasons else None


def _unproven(
    ledger: Ledger, cache: CacheRecord, verify: Verify, secrets: Mapping[str, str]
) -> str | None:
    """Why the cache's tree is not proven (the module doc), or None."""
    boot = last_boot(ledger, cache.id)
    if boot is None:
        return "no boot used it here"
    uses = recorded_uses(cache_uses(ledger, boot_id=boot.id))
    writes = [(w.path, w.bytes) for w in untracked_writes(ledger, boot.id)]
    verdict, phrase = recorded_warmth(uses, writes)
    if verdict == "partial":
        return f"its last boot {boot.id} was partial: {phrase}"
    previous = last_scan(cache)
    if previous is None:
        return "its last scan cannot be read: archive or boot it again"
    withheld = [w.path for w in withheld_files(previous, tainted_files(ledger, cache.id))]
    if withheld:  # their paths as fingerprints spell them: masked where a name held a value
        held = f"{count_of(len(withheld), 'file')} withheld from the archive for a secret's value"
        return f"{held} ({_some(withheld)}): never baked"
    if links := masked_links(previous):
        return f"symlinks name a secret's value ({_some(links)}): never baked"
    archive = archive_of(ledger, cache.id)
    if archive is None or archive.tree_digest != cache.tree_digest:
        return "its tree is not archived: `lifecycle archive` it first"
    checked = verify(archive)
    if checked.collected and not checked.problems:  # by a gc's rule: no evidence, no loss
        return f"{'; '.join(checked.collected)}: `lifecycle archive` it again"
    if checked.problems or checked.document is None:
        return f"its archive does not verify: {'; '.join(checked.problems) or 'no record'}"
    if scan(Path(cache.host_path), previous, secrets=secrets).tree_digest != cache.tree_digest:
        return "changed since its last scan: boot it (or restore it) again"
    return None


def _some(paths: Sequence[str]) -> str:
    return ", ".join(paths[:3]) + (f", … ({len(paths)} in all)" if len(paths) > 3 else "")


def _baked(ledger: Ledger, cache: CacheRecord, path: str) -> BakedCache:
    archive = archive_of(ledger, cache.id)
    boot = last_boot(ledger, cache.id)
    assert archive is not None and boot is not None and cache.tree_digest is not None
    where = ArchiveLocation.parse(archive.location)
    record = {"location": where.url(), "key": archive.record_key, "sha256": archive.record_sha256}
    return BakedCache(cache.cache_name, path, cache.id, cache.tree_digest, boot.id, record)
