"""`lifecycle restore`: a cache's files back from the archive, by version; or with `--best`, the
newest complete version, archived by any host, of each cache a boot here would reuse."""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import ClassVar

import click

from lifecycle.archive.catalog import Best, best_versions
from lifecycle.archive.config import resolve_location
from lifecycle.archive.partials import partial_prefix, remove_dead_partials
from lifecycle.archive.record import pushed_images
from lifecycle.archive.restore import (
    FileRestored,
    RestoreReport,
    check_cache_id,
    check_tree,
    restore_beside,
    restore_cache,
    restore_file,
)
from lifecycle.archive.store import BlobStore
from lifecycle.build.engine import find_built
from lifecycle.build.plan import cache_key, key_factors
from lifecycle.commands import verbs
from lifecycle.commands.context import Context
from lifecycle.errors import EXIT_NO, EXIT_OK, DiskFull, LifecycleError, no_room
from lifecycle.ledger import Ledger
from lifecycle.manifest import find_manifest, load_manifest
from lifecycle.manifest.load import manifest_digest
from lifecycle.report import Report, unread_lines
from lifecycle.table import human_bytes, lines_text, visible


def run(ctx: Context, request: verbs.Restore) -> RestoreReport | FileReport | RestoreBestReport:
    """One of restore's four forms, as the flags given say."""
    target, best, file_path, output = (
        request.target,
        request.best,
        request.file_path,
        request.output,
    )
    if (target is None) == (best is None) or (request.cache_name and not best):
        raise click.UsageError("give CACHE[@TREE], or --best MANIFEST [--cache NAME]")
    if (file_path is None) != (output is None) or (file_path and target is None):
        raise click.UsageError("--file PATH goes with --output FILE and CACHE[@TREE]")
    if request.into is not None and (target is None or file_path is not None):
        raise click.UsageError("--into DIR goes with CACHE[@TREE] alone")
    if best is not None:
        return run_best(ctx, best, request.cache_name, request.source)
    assert target is not None
    if file_path is not None and output is not None:
        return run_restore_file(ctx, target, request.source, file_path, output)
    return run_restore(ctx, target, request.source, request.into)


def run_restore(
    ctx: Context, target: str, source: str | None, into: Path | None = None
) -> RestoreReport:
    """Restore one cache's files from the archive: `CACHE` (its newest version with files) or
    `CACHE@TREE` (that version, by its tree digest or a prefix of at least 8 digits); in place,
    or `into` a new dir beside it (the cache and the ledger untouched)."""
    cache_id, at, tree = target.partition("@")
    location = resolve_location(source, ctx.environ, ctx.project, option="--from")
    check_cache_id(cache_id)
    check_tree(tree if at else None)  # `CACHE@` names no version: an error, not the newest
    client = ctx.s3()
    if into is not None:
        beside = restore_beside(
            client, location, cache_id, into, tree=tree or None, progress=ctx.say,
            checkpoint=ctx.checkpoint(),
        )  # fmt: skip
        return beside
    with ctx.ledger() as ledger:
        done = restore_cache(
            ledger, ctx.home, client, location, cache_id, tree=tree or None, progress=ctx.say
        )
    return done


@dataclass(frozen=True)
class FileReport(Report):
    """`restore CACHE --file PATH --output FILE`: one file of a cache, written out."""

    FORMAT: ClassVar[str] = "lifecycle-restore-file/1"
    restored: FileRestored
    output: str

    def to_json(self) -> dict[str, object]:
        return {"format": self.FORMAT, "output": self.output, **asdict(self.restored)}

    @property
    def notes(self) -> tuple[str, ...]:
        return unread_lines(self.restored.unreadable, "passed over")

    def text(self) -> str:
        """One line: what was written where."""
        done = self.restored
        return (
            f"restored {done.path} of {done.cache_id} ({human_bytes(done.size)}, sha256"
            f" {done.sha256[:12]}…) to {self.output}\n"
        )


def run_restore_file(
    ctx: Context, target: str, source: str | None, path: str, output: Path
) -> FileReport:
    """Write one file of an archived cache version to `output` (a new file), checked against
    its sha256, without downloading the rest of the cache."""
    cache_id, at, tree = target.partition("@")
    location = resolve_location(source, ctx.environ, ctx.project, option="--from")
    check_tree(tree if at else None)  # `CACHE@` names no version: an error, not the newest
    client = ctx.s3()
    remove_dead_partials(output)  # what a restore to FILE killed half way left beside it
    partial = output.with_name(partial_prefix(output) + secrets.token_hex(4))
    try:
        with partial.open("xb") as sink:
            done = restore_file(
                client, location, cache_id, path, sink, tree=tree or None,
                checkpoint=ctx.checkpoint(),
            )  # fmt: skip
        # A link, not a rename: it fails rather than replace a file there (FILE must be new).
        os.link(partial, output)
    except OSError as exc:
        if no_room(exc):  # the host's state, not a bad --output: exit 3
            raise DiskFull(output) from exc
        raise LifecycleError(f"{output}: {exc.strerror}") from exc
    finally:
        partial.unlink(missing_ok=True)
    return FileReport(done, str(output))


@dataclass(frozen=True)
class BestFailed:
    """The restore of a chosen version that failed; those after it were not tried."""

    cache_name: str
    cache_id: str
    error: str  # its one line, as the CLI prints an error
    exit_code: int  # its error's, which the command exits with


@dataclass(frozen=True)
class RestoreBestReport(Report):
    """`restore --best`: for each cache of a manifest, the version chosen and restored."""

    FORMAT: ClassVar[str] = "lifecycle-restore-best/1"
    manifest: str  # its name
    manifest_digest: str
    arch: str
    image: str  # where the labels of the cache keys came from
    keys: dict[str, str]  # cache name -> the key a boot here computes
    restored: tuple[RestoreReport, ...]
    chosen: tuple[Best, ...]
    none_found: tuple[str, ...]  # cache names with no complete version of their key
    # Records that could not be read (s3:// URL -> why): image records left out, versions
    # passed over
    unreadable: dict[str, str] = field(default_factory=dict)
    failed: BestFailed | None = None  # the restore that failed: the caches before it are live

    @property
    def exit_code(self) -> int:
        if self.failed is not None:
            return self.failed.exit_code
        return EXIT_NO if self.none_found else EXIT_OK

    @property
    def notes(self) -> tuple[str, ...]:
        return (self.failed.error,) if self.failed else ()

    def text(self) -> str:
        """A paragraph per cache restored (and per one not, after a failure), then the names
        nothing matched."""
        lines = [
            f"best versions for {self.manifest} (sha256:{self.manifest_digest[:12]}…),"
            f" arch {self.arch}, image {self.image}:"
        ]
        for n, best in enumerate(self.chosen):
            lines.append(
                f"{best.cache_name}: {best.cache_id}@{best.tree_digest[:12]} archived by"
                f" {best.host} at {best.archived_at}"
            )
            if n < len(self.restored):
                lines.append("  " + self.restored[n].text().splitlines()[0])
            elif self.failed is not None and best.cache_name == self.failed.cache_name:
                lines.append("  not restored: its restore failed (stderr says why)")
            elif self.failed is not None:
                lines.append(f"  not restored: not tried after {self.failed.cache_name} failed")
        lines += [
            f"{name}: no version of key {self.keys[name][:12]}… holds its files from a boot"
            " that ended ok (archive --with-content); boots cold"
            for name in self.none_found
        ]
        return lines_text(lines)


def run_best(
    ctx: Context, ref: str, cache_name: str | None, source: str | None
) -> RestoreBestReport:
    """Restore, for each cache of the manifest (or only `cache_name`), the newest complete
    version in the archive whose key is the one a boot of it here would compute."""
    loaded = load_manifest(find_manifest(ctx.manifests_dir, ref))
    digest = manifest_digest(loaded)
    names = list(loaded.manifest.active_caches())
    if cache_name is not None and cache_name not in names:
        raise LifecycleError(f"--cache {cache_name!r}: {ref} has the caches {', '.join(names)}")
    location = resolve_location(source, ctx.environ, ctx.project, option="--from")
    client = ctx.s3()
    store = BlobStore(client, location)
    with ctx.ledger() as ledger:
        labels, image, left_out = _image_labels(ctx, ledger, store, digest, ref)
        for line in unread_lines(left_out):
            ctx.note(line)
        wanted = [cache_name] if cache_name else names
        keys = {n: cache_key(key_factors(labels, n, digest, ctx.gpu_arch)) for n in wanted}
        found, unread = best_versions(store, keys)
        chosen = {n: found[n] for n in wanted if n in found}  # the manifest's order, every time
        for line in unread_lines(unread, "passed over"):
            ctx.note(line)
        restored, failed = [], None
        for best in chosen.values():
            try:
                done = restore_cache(
                    ledger, ctx.home, client, location, best.cache_id, tree=best.tree_digest,
                    progress=ctx.say,
                )  # fmt: skip
            except LifecycleError as exc:
                # What was made live before it is said all the same; nothing after it is tried,
                # as what failed (S3 gone silent, the ledger) would most likely fail it too.
                failed = BestFailed(best.cache_name, best.cache_id, str(exc), exc.exit_code)
                break
            # The same damaged record is met again among the versions of the chosen tree.
            again = {u: w for u, w in done.unreadable.items() if u not in unread}
            for line in unread_lines(again, "passed over"):
                ctx.note(line)
            unread |= done.unreadable
            restored.append(done)
    none = tuple(n for n in wanted if n not in chosen)
    return RestoreBestReport(
        loaded.manifest.name, digest, ctx.gpu_arch, image, keys, tuple(restored),
        tuple(chosen.values()), none, left_out | unread, failed,
    )  # fmt: skip


def _image_labels(
    ctx: Context, ledger: Ledger, store: BlobStore, digest: str, ref: str
) -> tuple[dict[str, str], str, dict[str, str]]:
    """The labels of the image a boot here would run (built or pulled here), else of the newest
    one the archive records as pushed (what `boot --pull` would pull); which it was; and the
    image records left out as they could not be read (s3:// URL -> why)."""
    built = find_built(ctx.docker(), ledger, digest)
    if built is not None:
        return dict(built.labels or {}), f"{built.id} on this host", {}
    pushed, unread = pushed_images(store, digest)
    if pushed:
        return dict(pushed[0].labels), f"{pushed[0].reference} (as pushed)", unread
    # A why may hold the record's own fields, which the bucket's writer chose.
    unreadable = "".join(
        f"; cannot read {visible(url)}: {visible(why)}" for url, why in unread.items()
    )
    raise LifecycleError(
        f"no image of {ref} on this host, and none recorded as pushed at"
        f" {store.location.url()}{unreadable}: build it here, or `build --push` it on another host"
    )
