"""`lifecycle audit result|cache`: the chain behind a result, or everything on a cache.

Read from this host's ledger, or with `--from s3://BUCKET/PREFIX` from the archive alone (no
ledger is opened or made): the same JSON either way, for facts that were archived.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from lifecycle.archive.location import ArchiveLocation
from lifecycle.archive.store import BlobStore
from lifecycle.audit import from_ledger, from_s3
from lifecycle.audit.chain import (
    CACHE_FORMAT,
    CHAIN_FORMAT,
    COLLECTED_FORMAT,
    CacheAudit,
    Chain,
    ChainFacts,
    Collected,
    build_cache_audit,
    build_chain,
)
from lifecycle.audit.render import STATEMENT_TYPE, cache_text, chain_text, statement
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import LifecycleError, check_replaceable, path_fault, quoted
from lifecycle.home import NoLedger, write_named
from lifecycle.ledger import Ledger
from lifecycle.report import Report, unread_lines
from lifecycle.table import lines_text

Facts = TypeVar("Facts")


@dataclass(frozen=True)
class Source:
    """Where an audit or a verify reads: this host's ledger, or the archive alone."""

    ledger: Ledger | None
    client: Any
    archive: ArchiveLocation | None  # --from
    where: str  # for the human form: "the ledger at …" or the s3:// URL

    def facts(
        self,
        of_archive: Callable[[BlobStore, str], Facts],
        of_ledger: Callable[[Ledger, str], Facts],
        target: str,
    ) -> Facts:
        """What the archive (with --from) or else the ledger knows of `target`."""
        if self.archive is not None:
            return of_archive(BlobStore(self.client, self.archive), target)
        assert self.ledger is not None, "a source is the archive or the ledger"
        return of_ledger(self.ledger, target)


@contextmanager
def reading(ctx: Context, source: str | None) -> Iterator[Source]:
    """With --from, the archive alone and no ledger at all; without, the ledger that must
    already exist (audit and verify never make an empty one)."""
    if source is not None:
        location = ArchiveLocation.parse(source, "--from")  # the flag first, then the env
        yield Source(None, ctx.s3(), location, location.url())
        return
    client = ctx.s3()
    try:
        ledger = Ledger.open(ctx.home, create=False)
    except NoLedger as exc:
        raise LifecycleError(f"{exc}; add --from s3://BUCKET/PREFIX to read the archive") from None
    try:
        yield Source(ledger, client, None, f"the ledger at {ctx.home}")
    finally:
        ledger.close()


@dataclass(frozen=True)
class ChainReport(Report):
    """The chain behind a result (`lifecycle-audit-chain/1`, built by lifecycle.audit.chain)."""

    FORMAT: ClassVar[str] = CHAIN_FORMAT
    chain: Chain
    where: str
    provenance: Path | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.chain)

    def text(self) -> str:
        """The chain, link by link; then where the provenance statement went."""
        text = chain_text(self.chain, self.where)
        if self.provenance is not None:
            text += f"provenance: {self.provenance} (in-toto Statement v1)\n"
        return text


@dataclass(frozen=True)
class CacheAuditReport(Report):
    """Everything on a cache (`lifecycle-audit-cache/1`)."""

    FORMAT: ClassVar[str] = CACHE_FORMAT
    audit: CacheAudit
    where: str

    @property
    def notes(self) -> tuple[str, ...]:
        return unread_lines(self.audit.get("unreadable", {}))

    def to_json(self) -> dict[str, Any]:
        return dict(self.audit)

    def text(self) -> str:
        """The cache's boots and results."""
        return cache_text(self.audit, self.where)


@dataclass(frozen=True)
class CollectedReport(Report):
    """A target whose records a gc removed by rule (`lifecycle-audit-collected/1`): no chain to
    follow, and nothing lost, so exit 0 as `verify` says of it."""

    FORMAT: ClassVar[str] = COLLECTED_FORMAT
    collected: Collected
    where: str
    provenance: Path | None = None

    @property
    def notes(self) -> tuple[str, ...]:
        if self.provenance is None:
            return ()
        return (f"--provenance {self.provenance}: not written: there is no chain to state",)

    def to_json(self) -> dict[str, Any]:
        gone = self.collected
        return {"format": self.FORMAT, "target": gone.target, "kind": gone.kind,
                "source": self.where, "collected": gone.records}  # fmt: skip

    def text(self) -> str:
        """A line per record gone: what gc's record says of it, and that the chain ends there."""
        gone = self.collected
        lines = [f"# audit of {gone.kind} {gone.target}, from {self.where}"]
        lines += [
            f"{gone.kind} {gone.target}: {url}: {note}: the chain ends there"
            for url, note in gone.records.items()
        ]
        return lines_text(lines)


def result(ctx: Context, request: verbs.AuditResult) -> ChainReport | CollectedReport:
    """The chain of one result; with --provenance, also written there as an in-toto Statement.
    A result the archive no longer holds as a gc collected it: which gc, and no chain."""
    result_id, source, provenance = request.result_id, request.source, request.provenance
    if provenance is not None:
        check_output_file(provenance, "--provenance")

    def of_ledger(ledger: Ledger, rid: str) -> ChainFacts:  # its snapshots are in this home
        return from_ledger.result_facts(ledger, ctx.home, rid)

    with reading(ctx, source) as read:
        facts = read.facts(from_s3.result_facts, of_ledger, result_id)
    if isinstance(facts, Collected):
        return CollectedReport(facts, read.where, provenance)
    chain = build_chain(facts)
    if provenance is not None:
        write_provenance(chain, provenance)
    return ChainReport(chain, read.where, provenance)


def cache(ctx: Context, request: verbs.AuditCache) -> CacheAuditReport | CollectedReport:
    """A cache, its boots and its results; one none of whose versions the archive holds as a
    gc collected them: which gc, and nothing more."""
    cache_id, source = request.cache_id, request.source
    with reading(ctx, source) as read:
        facts = read.facts(from_s3.cache_facts, from_ledger.cache_facts, cache_id)
    if isinstance(facts, Collected):
        return CollectedReport(facts, read.where)
    return CacheAuditReport(build_cache_audit(facts), read.where)


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, a file `option` could not write: its directory must exist."""
    fault = path_fault(path)
    if fault:
        raise LifecycleError(f"{option} {quoted(str(path))}: {fault}")
    if path.is_dir():
        raise LifecycleError(f"{option} {path}: is a directory")
    if not path.parent.is_dir():
        raise LifecycleError(f"{option} {path}: no such directory {path.parent}")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise LifecycleError(f"{option} {path}: {path.parent} is not writable")
    check_replaceable(path, "an in-toto Statement `audit --provenance` wrote", STATEMENT_TYPE)


def write_provenance(chain: Chain, path: Path) -> None:
    """Write the chain's in-toto Statement v1 to `path`, whole or not at all (replacing one
    written before: check_output_file refused any other file)."""
    document = json.dumps(statement(chain), indent=2) + "\n"
    try:
        write_named(path, document.encode())
    except OSError as exc:
        raise LifecycleError(f"--provenance {path}: {exc.strerror or exc}") from None
